//go:build !race

package main

// raceBuild is true when the tests run with the race detector.
const raceBuild = false
