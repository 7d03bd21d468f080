// Package e2e holds sandgate's end-to-end tests, fault drills and
// benchmarks: each starts `sandgate serve` in-process (package cli's Run,
// so the race detector covers the server) on a loopback port with a fresh
// database, against the real Docker daemon, and drives it over HTTP and
// through the command line. It has no code outside its tests.
//
// The cluster drills build with -tags cluster (make test-cluster), the
// soak test with -tags soak (make soak).
package e2e
