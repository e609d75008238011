package consul

// SetTermSource makes f check writes against the terms term returns, so
// that a test can send a write under a term that has already ended in
// Consul while this instance still believes it holds it (as a paused
// process does).
func SetTermSource(f *FencedKV, term func() (Term, bool)) { f.term = term }
