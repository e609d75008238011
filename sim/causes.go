package sim

// Reallocations counts the changes of jobs' allocations over a run by
// kind, to tell which decisions the restarts come from. A restart is a
// Grow, Shrink, Move or Resume; Start (a job's first allocation) and
// Preempt (to no GPUs) are not.
type Reallocations struct {
	// Start counts first allocations, Resume allocations of a job that
	// was preempted, Preempt changes to no GPUs.
	Start, Resume, Preempt int
	// Grow and Shrink count changes to more and fewer GPUs, Move changes
	// to the same number of GPUs elsewhere (other nodes, or another
	// shape under the Sia rules, another GPU type).
	Grow, Shrink, Move int
	// GrowBy counts growth steps by the factor of GPUs: [0] up to 1.5x,
	// [1] up to 2x, [2] up to 4x, [3] more.
	GrowBy [4]int
	// Early counts restarts of jobs within their first
	// 10 restart delays on their previous allocation.
	Early int
}

// Restarts is the number of restarts among the reallocations.
func (r Reallocations) Restarts() int { return r.Grow + r.Shrink + r.Move + r.Resume }

// Reallocations returns the changes of allocation of the run so far.
func (s *Simulator) Reallocations() Reallocations { return s.realloc }

// countRealloc records the change of job j from old to cur GPUs (called
// before j.reallocate).
func (s *Simulator) countRealloc(j *job, old, cur []string, delay float64) {
	r := &s.realloc
	switch {
	case len(cur) == 0:
		r.Preempt++
		return
	case j.restarts < 0:
		r.Start++
		return
	case len(old) == 0:
		r.Resume++
		return
	case len(cur) > len(old):
		r.Grow++
		f := float64(len(cur)) / float64(len(old))
		switch {
		case f <= 1.5:
			r.GrowBy[0]++
		case f <= 2:
			r.GrowBy[1]++
		case f <= 4:
			r.GrowBy[2]++
		default:
			r.GrowBy[3]++
		}
	case len(cur) < len(old):
		r.Shrink++
	default:
		r.Move++
	}
	if s.now-j.lastRealloc < 10*max(delay, 1) {
		r.Early++
	}
}
