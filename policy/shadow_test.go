package policy

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// bruteShadows is the quadratic definition Warnings must agree with: the
// first earlier rule that covers each rule.
func bruteShadows(p *Policy) map[int]int {
	out := map[int]int{}
	for j, r := range p.Rules {
		gj, _ := compileGlob(cmp.Or(r.Tool, r.Method))
		for i := range j {
			e := &p.Rules[i]
			gi, _ := compileGlob(cmp.Or(e.Tool, e.Method))
			sameKind := (e.Tool != "") == (r.Tool != "")
			if sameKind && gi.covers(gj) || !sameKind && e.Method != "" && gi.match("tools/call") {
				out[j] = i
				break
			}
		}
	}
	return out
}

// TestShadowsAgreeWithTheDefinition: on random policies of literal and
// wildcard tool and method rules, Warnings finds exactly the shadowed
// rules, each with the first rule that shadows it.
func TestShadowsAgreeWithTheDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "ab", "a*", "b*", "*", "ab?", "[ab]b", "tools/call", "tools/*", "ping", "*/*"}
	for range 2000 {
		p := &Policy{}
		for range rng.IntN(8) + 1 {
			n := names[rng.IntN(len(names))]
			if rng.IntN(2) == 0 {
				p.Rules = append(p.Rules, Rule{Tool: n})
			} else {
				p.Rules = append(p.Rules, Rule{Method: n})
			}
		}
		want := bruteShadows(p)
		got := map[int]int{}
		for _, w := range p.Warnings("p") {
			var j, i int
			if _, err := fmt.Sscanf(w.Error(), "p.rules[%d]: never applies: rules[%d]", &j, &i); err == nil {
				got[j] = i
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("rules %+v: shadows %v, want %v", p.Rules, got, want)
		}
	}
}

// TestShadowCheckIsNearLinear: 200,000 rules (which took over 60 s and
// 540 MB to check) are checked, their shadowed ones found; a value of
// 50 MiB is not echoed whole in a warning.
func TestShadowCheckIsNearLinear(t *testing.T) {
	p := &Policy{}
	for i := range 200_000 {
		p.Rules = append(p.Rules, Rule{Tool: fmt.Sprint("tool_", i%150_000)})
	}
	p.Rules = append(p.Rules, Rule{Tool: "w_*"}, Rule{Tool: "w_x"}, Rule{Tool: strings.Repeat("z", 50<<20)}, Rule{Tool: strings.Repeat("z", 50<<20)})
	ws := p.Warnings("p")
	if len(ws) != 50_000+2 {
		t.Fatalf("%d warnings, want %d", len(ws), 50_000+2)
	}
	if last := ws[len(ws)-1].Error(); len(last) > 400 || !strings.Contains(last, "bytes)") {
		t.Errorf("the last warning is %d bytes: %.120s", len(last), last)
	}
	if !slices.ContainsFunc(ws, func(w *Problem) bool { return strings.Contains(w.Error(), `rules[200000] (tool "w_*")`) }) {
		t.Error("w_x is not shadowed by w_*")
	}
}

func BenchmarkWarnings(b *testing.B) {
	p := &Policy{}
	for i := range 20_000 {
		p.Rules = append(p.Rules, Rule{Tool: fmt.Sprint("tool_", i)})
	}
	for b.Loop() {
		p.Warnings("p")
	}
}
