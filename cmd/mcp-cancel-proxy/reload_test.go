package main

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
)

// TestReloadKeepsThePolicyOfAnEmptyFile: a file rewritten in place is
// empty for a moment, and an empty file is a valid configuration (the
// defaults: no rules); a reload that reads it, or a file of only comments,
// or an invalid one, keeps the policy in force; a real change reloads.
func TestReloadKeepsThePolicyOfAnEmptyFile(t *testing.T) {
	e, err := policy.New(policy.Options{Policy: policy.Defaults(), Audit: policy.Audit{Path: "off"}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
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
		if _, got := reload(path, e, zaptest.NewLogger(t), "test", []byte("before")); got != c.reloaded {
			t.Errorf("%s: reloaded %v, want %v", c.name, got, c.reloaded)
		}
	}
}
