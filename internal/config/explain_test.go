package config_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
)

// TestErrorsExplainThemselves: an unknown key gets the key it was likely
// meant as, or the section it belongs in; a wrong kind of value is said
// in plain words, never with a Go type's name.
func TestErrorsExplainThemselves(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"log:\n  levl: debug\n", `f.yaml:2:3: log.levl: unknown setting "levl": did you mean "level"?`},
		{"http:\n  cancel_grase: 1s\n", `did you mean "cancel_grace"?`},
		{"policy:\n  rules:\n    - tool: x\n      retries: 3\n", `policy.rules[0].retries: unknown setting "retries": it is a setting of a hook: policy.rules[].on_cancel.retries (also under on_timeout, on_late_result, on_late_error)`},
		{"http:\n  late_window: 1s\n", `it is a setting of policy.late_window`},
		{"policy:\n  rules:\n    - tool: x\n      on_cancel: 5\n", `policy.rules[0].on_cancel: "5" is not a block of settings (name: value lines)`},
		{"log: [a, b]\n", `f.yaml:1:1: log: a list is not a block of settings`},
		{"http:\n  allowed_origins: {a: b}\n", `a block of settings is not a list of strings`},
	} {
		_, err := config.Parse("f.yaml", strings.NewReader(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v\nwant %q", c.yaml, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "policy.") && strings.Contains(err.Error(), "into") || strings.Contains(err.Error(), "config.")) {
			t.Errorf("%q: a Go type's name in %v", c.yaml, err)
		}
	}
}

// TestWarningsWithErrors: a file with errors still gets its warnings (a
// shadowed rule), each rule shadowed named; an exec hook's program that is
// not on this machine is listed, one that is is not.
func TestWarningsWithErrors(t *testing.T) {
	cfg, err := config.Parse("f.yaml", strings.NewReader(`log:
  level: loud
policy:
  rules:
    - tool: "a*"
      timeout: 1m
    - tool: ab
      timeout: 2m
      on_cancel: {exec: ["./no-such-hook-here"]}
    - tool: abc
      on_timeout: {exec: ["true"]}
`))
	if err == nil || !strings.Contains(err.Error(), "log.level") {
		t.Fatalf("error %v, want log.level's", err)
	}
	if len(cfg.Warnings) != 2 || !strings.Contains(cfg.Warnings[0], "f.yaml:7:7: policy.rules[1]: warning: never applies") ||
		!strings.Contains(cfg.Warnings[1], "f.yaml:10:7: policy.rules[2]: warning: never applies") {
		t.Errorf("warnings %q, want rules 1 and 2 shadowed", cfg.Warnings)
	}
	if want := []string{`f.yaml:9:19: policy.rules[1].on_cancel.exec: program "./no-such-hook-here" not found on this machine`}; !slices.Equal(cfg.MissingPrograms, want) {
		t.Errorf("missing programs %q, want %q", cfg.MissingPrograms, want)
	}
}

// TestUnreloaded: only the settings outside the policy that changed are
// named.
func TestUnreloaded(t *testing.T) {
	a, err := config.Parse("a", strings.NewReader("http:\n  listen: 127.0.0.1:1\npolicy:\n  late_window: 1m\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := config.Parse("b", strings.NewReader("http:\n  listen: 127.0.0.1:2\nlog:\n  level: debug\npolicy:\n  late_window: 2m\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := config.Unreloaded(a, b), []string{"log.level", "http.listen"}; !slices.Equal(got, want) {
		t.Errorf("Unreloaded = %q, want %q", got, want)
	}
	if got := config.Unreloaded(a, a); len(got) != 0 {
		t.Errorf("Unreloaded(a, a) = %q", got)
	}
}
