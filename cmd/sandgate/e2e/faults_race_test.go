//go:build race

package e2e

// raceBuild is true when the tests run with the race detector; the server
// binary they start is then built with it too, which reuses the packages
// the test build compiled and checks the server process for races.
const raceBuild = true
