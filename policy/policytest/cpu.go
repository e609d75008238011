package policytest

import (
	"syscall"
	"time"
)

// ProcessCPU returns the CPU time (user and system) the process has used
// so far, 0 where it cannot be read: benchmarks report it per operation
// besides the wall time, which on a shared machine also counts waiting.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
