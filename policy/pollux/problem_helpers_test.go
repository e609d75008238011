package pollux

// Helpers of the tests only: a state as a dense rows × cols matrix, and
// the two-child crossover that crossMutate fuses with the mutation.

// dense returns the state as a rows × cols matrix (for tests and debugging).
func (s *spState) dense(rows, cols int) []uint8 {
	x := make([]uint8, rows*cols)
	for j := range rows {
		for _, e := range s.row(j) {
			x[j*cols+int(spNode(e))] = uint8(spGPUs(e))
		}
	}
	return x
}

// setDense encodes a rows × cols matrix into s.
func (s *spState) setDense(x []uint8, rows, cols int) {
	s.start = gaGrow(s.start, rows+1)
	s.ent = s.ent[:0]
	for j := range rows {
		s.start[j] = int32(len(s.ent))
		for n, v := range x[j*cols : (j+1)*cols] {
			if v != 0 {
				s.ent = append(s.ent, spEntry(int32(n), int32(v)))
			}
		}
	}
	s.start[rows] = int32(len(s.ent))
}

// crossover is single-point crossover over rows (Pollux, OSDI '21, §4.2;
// artifact pollux.py _crossover with pymoo's crossover_mask): the first
// cut rows of each child come from the other parent. cut = 0 copies the
// parents.
func (pr *polluxProblem) crossover(c0, c1, a, b int32, cut int) {
	xa, xb := &pr.states[a], &pr.states[b]
	spCross(&pr.states[c0], xa, xb, cut, pr.rows)
	spCross(&pr.states[c1], xb, xa, cut, pr.rows)
}

// spCross writes into c the rows [0, cut) of head and the rows [cut, rows)
// of tail.
func spCross(c, tail, head *spState, cut, rows int) {
	c.start = gaGrow(c.start, rows+1)
	hc, tc := head.start[cut], tail.start[cut]
	copy(c.start[:cut], head.start[:cut])
	for j := cut; j <= rows; j++ {
		c.start[j] = tail.start[j] - tc + hc
	}
	c.ent = append(append(c.ent[:0], head.ent[:hc]...), tail.ent[tc:]...)
}
