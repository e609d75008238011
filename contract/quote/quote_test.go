package quote

import "testing"

func TestCut(t *testing.T) {
	tests := map[string]struct {
		in   string
		n    int
		want string
	}{
		"short":          {"abc", 5, "abc"},
		"exact":          {"abcde", 5, "abcde"},
		"cut":            {"abcdef", 3, "abc..."},
		"rune boundary":  {"aé", 2, "a..."}, // é is two bytes: not split
		"zero":           {"abc", 0, "..."},
		"multibyte full": {"ééé", 4, "éé..."},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Cut(tc.in, tc.n); got != tc.want {
				t.Errorf("Cut(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
}
