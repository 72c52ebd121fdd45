package spell

import "testing"

func TestNearest(t *testing.T) {
	for _, c := range []struct {
		word string
		max  int
		want string
	}{
		{"valdate", 2, "validate"},
		{"levl", 2, "level"},
		{"hoks", 2, "hooks"},
		{"xyz", 2, ""},
		{"level", 0, "level"},
		{"", 2, ""},
	} {
		if got := Nearest(c.word, []string{"validate", "level", "hooks", "format"}, c.max); got != c.want {
			t.Errorf("Nearest(%q, %d) = %q, want %q", c.word, c.max, got, c.want)
		}
	}
	if d := Distance("kitten", "sitting"); d != 3 {
		t.Errorf("Distance(kitten, sitting) = %d, want 3", d)
	}
}
