package policy

import (
	"strings"
	"testing"
	"time"
)

// TestGlobMatchesSlashes: * matches any run of characters, / included, so
// method "*" matches tools/call and tool "*" a tool named with a / (issue 8,
// item 5).
func TestGlobMatchesSlashes(t *testing.T) {
	tests := []struct {
		glob, s string
		want    bool
	}{
		{"*", "tools/call", true},
		{"*", "user-profile/update", true},
		{"user-profile/*", "user-profile/update", true},
		{"tools/*", "tools/call", true},
		{"*/update", "user-profile/update", true},
		{"*/update", "user-profile/delete", false},
		{"deploy?", "deploy1", true},
		{"deploy?", "deploy12", false},
		{"db_[a-c]*", "db_backup", true},
		{"db_[!a-c]*", "db_backup", false},
		{`star\*`, "star*", true},
		{`star\*`, "starx", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"a.b", "axb", false},
	}
	for _, tt := range tests {
		g, err := compileGlob(tt.glob)
		if err != nil {
			t.Fatalf("compileGlob(%q): %v", tt.glob, err)
		}
		if got := g.match(tt.s); got != tt.want {
			t.Errorf("%q matching %q = %v, want %v", tt.glob, tt.s, got, tt.want)
		}
	}
	for _, bad := range []string{"a[b", `a\`, "[]"} {
		if _, err := compileGlob(bad); err == nil {
			t.Errorf("compileGlob(%q) accepted", bad)
		}
	}
	d := time.Second
	m := compile(&Policy{Rules: []Rule{{Tool: "*", Timeout: &d}}}, nil)
	if e := m.match("tools/call", "user-profile/update"); e != m.eff[0] {
		t.Error(`tool "*" does not apply to tool user-profile/update`)
	}
	m = compile(&Policy{Rules: []Rule{{Method: "*", Timeout: &d}}}, nil)
	if e := m.match("tools/call", "x"); e != m.eff[0] {
		t.Error(`method "*" does not apply to tools/call`)
	}
}

// TestWarningsForRulesThatNeverApply: validate warns of a rule an earlier
// one shadows, and of one that names a notification.
func TestWarningsForRulesThatNeverApply(t *testing.T) {
	p := &Policy{Rules: []Rule{
		{Tool: "deploy_*"},
		{Tool: "deploy_prod"},               // shadowed by rules[0]
		{Method: "tools/*"},                 // shadows every later tool rule
		{Tool: "other"},                     // shadowed by rules[2]
		{Method: "notifications/cancelled"}, // never a request
		{Tool: "fine_*"},                    // shadowed by rules[2] too
	}}
	var got []string
	for _, w := range p.Warnings("policy") {
		got = append(got, w.Error())
	}
	want := []string{
		"policy.rules[1]: never applies: rules[0] (tool \"deploy_*\")",
		"policy.rules[3]: never applies: rules[2] (method \"tools/*\")",
		"policy.rules[4].method: never matches",
		"policy.rules[5]: never applies: rules[2]",
	}
	all := strings.Join(got, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("warnings lack %q:\n%s", w, all)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d warnings, want %d:\n%s", len(got), len(want), all)
	}
}
