package apps

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
)

// qhullFS holds the tessellations SciPy's Delaunay (Qhull 2019.1, options
// "Qbb Qc Qz Q12 Qt") computes for the artifact applications' 3-D
// interpolation points, recorded by qhull/export.py with SciPy 1.10.1.
//
//go:embed qhull/*.txt.gz
var qhullFS embed.FS

// ReferenceTessellation returns the embedded SciPy tessellation recorded for
// the named artifact application (gzip-compressed, for Options.Reference),
// or nil if there is none.
func ReferenceTessellation(name string) ([]byte, error) {
	b, err := qhullFS.ReadFile("qhull/" + name + ".txt.gz")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read the recorded tessellation of %s: %w", name, err)
	}
	return b, nil
}
