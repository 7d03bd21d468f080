package executor

// Launcher is the warm containers' entrypoint script, for tests that make
// the containers a killed gateway leaves.
const Launcher = launcher
