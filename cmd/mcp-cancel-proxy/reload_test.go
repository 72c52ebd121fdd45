package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	zapobs "go.uber.org/zap/zaptest/observer"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
)

// defaultEngine is a policy engine of the defaults, audit off, shut down
// with the test.
func defaultEngine(t *testing.T) *policy.Engine {
	t.Helper()
	e, err := policy.New(policy.Options{Policy: policy.Defaults(), Audit: policy.Audit{Path: "off"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// TestReloadKeepsThePolicyOfAnEmptyFile: a file rewritten in place is
// empty for a moment, and an empty file is a valid configuration (the
// defaults: no rules); a reload that reads it, or a file of only comments,
// or an invalid one, keeps the policy in force; a real change reloads.
func TestReloadKeepsThePolicyOfAnEmptyFile(t *testing.T) {
	t.Parallel()
	e := defaultEngine(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	for _, c := range []struct {
		name, content string
		reloaded      bool
	}{
		{"empty", "", false},
		{"blank", "\n  \n", false},
		{"comments only", "# rewritten\n", false},
		{"null document", "---\n", false},
		{"invalid", "policy: [\n", false},
		{"a rule", "policy:\n  rules:\n    - tool: x\n      timeout: 5s\n", true},
	} {
		os.WriteFile(path, []byte(c.content), 0o600)
		if _, got := reload(path, e, zaptest.NewLogger(t), "test", []byte("before"), config.Defaults()); got != c.reloaded {
			t.Errorf("%s: reloaded %v, want %v", c.name, got, c.reloaded)
		}
	}
}

// TestReloadNamesWhatWaitsForARestart: a reload that also changes
// settings read only at start (http.listen) puts the policy in force and
// warns, naming those settings; one that changes only the policy does not.
func TestReloadNamesWhatWaitsForARestart(t *testing.T) {
	t.Parallel()
	e := defaultEngine(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(path, []byte("http:\n  listen: 127.0.0.1:1\n"), 0o600)
	started, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		content string
		want    []string
	}{
		{"http:\n  listen: 127.0.0.1:1\npolicy:\n  late_window: 1m\n", nil},
		{"http:\n  listen: 127.0.0.1:2\n  cancel_grace: 1s\npolicy:\n  late_window: 1m\n", []string{"http.listen", "http.cancel_grace"}},
	} {
		core, logs := zapobs.New(zap.WarnLevel)
		os.WriteFile(path, []byte(c.content), 0o600)
		if _, ok := reload(path, e, zap.New(core), "test", nil, started); !ok {
			t.Fatalf("%q: not reloaded", c.content)
		}
		var got []string
		for _, l := range logs.All() {
			if f, ok := l.ContextMap()["settings"].([]any); ok {
				for _, k := range f {
					got = append(got, k.(string))
				}
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: settings named %q, want %q", c.content, got, c.want)
		}
	}
}

// TestValidateStrict: an exec hook whose program is missing is a warning
// (exit 0) for validate and an error (exit 1) for validate --strict; a
// file with errors shows its warnings too.
func TestValidateStrict(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("policy:\n  rules:\n    - tool: x\n      on_cancel: {exec: [\"./no-such-hook-here\"]}\n"), 0o600)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("log:\n  levl: x\npolicy:\n  rules:\n    - tool: \"*\"\n    - tool: y\n"), 0o600)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{path}, 0, `policy.rules[0].on_cancel.exec: warning: program "./no-such-hook-here" not found`},
		{[]string{"--strict", path}, 1, `policy.rules[0].on_cancel.exec: error: program "./no-such-hook-here" not found`},
		{[]string{bad}, 1, "policy.rules[1]: warning: never applies"},
		{[]string{bad}, 1, `did you mean "level"?`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"validate"}, c.args...), io.NopCloser(strings.NewReader("")), outCloser{&stdout}, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("validate %q: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}

// TestReloadSaysAGoneFileOnce: the folder of the configuration file is
// watched, and the events feed beside it changes all the time; once the
// file has gone, that is said once, not at each change (it was said every
// 100 ms); once it is back, it is read again.
func TestReloadSaysAGoneFileOnce(t *testing.T) {
	t.Parallel()
	e := defaultEngine(t)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("policy:\n  rules: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	core, logs := zapobs.New(zap.DebugLevel)
	r := &reloader{path: path, e: e, log: zap.New(core), started: config.Defaults()}
	r.last, _ = os.ReadFile(path)
	os.Remove(path)
	for range 5 { // the events feed beside it written, again and again
		r.changed()
	}
	if n := logs.FilterMessageSnippet("invalid").Len(); n != 1 {
		t.Errorf("the gone file was said %d times, want once:\n%v", n, logs.All())
	}
	if err := os.WriteFile(path, []byte("policy:\n  rules:\n    - tool: x\n      timeout: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.changed()
	if logs.FilterMessageSnippet("reloading the policy").Len() != 1 {
		t.Errorf("the file back was not read again:\n%v", logs.All())
	}
}
