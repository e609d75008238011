//go:build !unix

package nomadtest

import "os"

// flock is a no-op where flock(2) does not exist: tests then share the
// cluster without serialising.
func flock(*os.File) error { return nil }
