package envexpand

import "testing"

func TestExpand(t *testing.T) {
	env := map[string]string{"TOKEN": "s3cret", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for in, want := range map[string]string{
		"Bearer ${TOKEN}": "Bearer s3cret", "$$5": "$5", "a$b": "a$b", "${EMPTY}x": "x", "plain": "plain",
		"https://hooks.test/${TOKEN}/x?k=${TOKEN}": "https://hooks.test/s3cret/x?k=s3cret",
	} {
		if got, err := expand(in, lookup); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{"${UNSET}": "${UNSET} is not set in the environment", "${TOKEN": "${ without its }"} {
		if _, err := expand(in, lookup); err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}
