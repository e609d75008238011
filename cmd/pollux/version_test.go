package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestVersionCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &errb); err != nil {
		t.Fatalf("pollux version: %v (stderr %q)", err, errb.String())
	}
	if got, want := strings.TrimSpace(out.String()), "pollux "+Version; got != want {
		t.Fatalf("pollux version printed %q, want %q", got, want)
	}
}

// The Python package is installed into training images separately from the
// binary; both say which release they are with one string.
func TestVersionMatchesPythonPackage(t *testing.T) {
	path := filepath.Join("..", "..", "worker", "python", "pollux", "__init__.py")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^__version__ = "([^"]+)"$`).FindSubmatch(src)
	if m == nil {
		t.Fatalf("%s: no line __version__ = \"...\"", path)
	}
	if string(m[1]) != Version {
		t.Fatalf("%s has __version__ %q, pollux version is %q: make them equal", path, m[1], Version)
	}
}
