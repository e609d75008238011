//go:build unix

package nomadtest

import (
	"os"
	"syscall"
)

// flock takes an exclusive lock on f, blocking.
func flock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }
