package config

import (
	"strings"
	"testing"
)

// TestHugeValuesAreNotEchoed: a bad value of 2 MiB (50 MiB were printed whole) is named in its error,
// cut, not printed whole.
func TestHugeValuesAreNotEchoed(t *testing.T) {
	huge := strings.Repeat("x", 2<<20)
	for _, doc := range []string{
		"child:\n  term_after: " + huge + "\n",
		"http:\n  upstream_transport: " + huge + "\n",
		"policy:\n  rules:\n    - tool: x\n      on_cancel:\n        http:\n          url: ftp://" + huge + "\n",
		"policy:\n  rules:\n    - tool: \"[" + huge + "\"\n",
		"policy:\n  rules:\n    - tool: x\n      max_concurrent_scope: " + huge + "\n",
	} {
		_, err := Parse("f.yaml", strings.NewReader(doc))
		if err == nil {
			t.Fatalf("%.40s...: no error", doc)
		}
		if len(err.Error()) > 1000 {
			t.Errorf("%.40s...: an error of %d bytes: %.100s", doc, len(err.Error()), err)
		}
	}
}

// TestCorrelateCredentialNamesRefused: correlate pointers ending in a
// credential's name are refused, those this release only warned of (pwd,
// jwt, private_key...) and a session id among them (issue 40, item 8); a
// run id is not.
func TestCorrelateCredentialNamesRefused(t *testing.T) {
	for _, name := range []string{"db_pwd", "jwt", "private_key", "api_key", "sessionId", "session_id"} {
		_, err := Parse("f.yaml", strings.NewReader("policy:\n  rules:\n    - tool: x\n      correlate:\n        a: /_meta/"+name+"\n"))
		if err == nil || !strings.Contains(err.Error(), "names a credential") {
			t.Errorf("a pointer to %s: %v, want it refused", name, err)
		}
	}
	if _, err := Parse("f.yaml", strings.NewReader("policy:\n  rules:\n    - tool: x\n      correlate:\n        c: /_meta/runId\n")); err != nil {
		t.Errorf("a run id was refused: %v", err)
	}
}
