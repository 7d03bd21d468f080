package executor

// Launcher is the warm containers' entrypoint script, for tests that make
// the containers a killed gateway leaves.
const Launcher = launcher

// WarmIdle reports how many warm containers are started and waiting for
// a run, over all profiles; 0 without a warm pool.
func (e *Executor) WarmIdle() int {
	p := e.pool
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, prof := range p.profiles {
		n += len(prof.idle)
	}
	return n
}
