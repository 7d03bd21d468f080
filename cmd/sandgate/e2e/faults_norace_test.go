//go:build !race

package e2e

// raceBuild is true when the tests run with the race detector.
const raceBuild = false
