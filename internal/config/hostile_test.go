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

// TestCorrelateCredentialNamesWarn: correlate pointers ending in a name
// newly known as a credential's (pwd, jwt, private_key...) are warnings,
// not errors, for one release; today's names stay errors.
func TestCorrelateCredentialNamesWarn(t *testing.T) {
	cfg, err := Parse("f.yaml", strings.NewReader("policy:\n  rules:\n    - tool: x\n      correlate:\n        a: /_meta/db_pwd\n        b: /_meta/jwt\n        c: /_meta/runId\n"))
	if err != nil {
		t.Fatalf("newly denied names refused the start: %v", err)
	}
	all := strings.Join(cfg.Warnings, "\n")
	for _, want := range []string{"correlate.a: warning: /_meta/db_pwd names what looks like a credential", "correlate.b: warning: /_meta/jwt"} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "runId") {
		t.Errorf("a run id is warned of:\n%s", all)
	}
	if _, err := Parse("f.yaml", strings.NewReader("policy:\n  rules:\n    - tool: x\n      correlate:\n        a: /_meta/api_key\n")); err == nil {
		t.Error("a pointer to an API key was accepted")
	}
}
