package policy

import (
	"cmp"
	"fmt"
	"time"
)

// A call may be ended by three settings of its rule: timeout (pushed back
// by progress with reset_on_progress), max_timeout, and client_timeout.
// Set together they can hide one another; what follows says which of them
// ends a call, for validate's warnings and --explain.

// layers says what ends a call of e whose client gives up after budget
// (0: never), and which of the settings never can.
func layers(e *Effective, budget time.Duration) (ends string, never []string) {
	t, m, reset := e.Timeout, e.MaxTimeout, e.ResetOnProgress && e.Timeout > 0
	base := fmt.Sprintf("by its deadline, %v after it starts", t)
	if reset {
		base = fmt.Sprintf("by its deadline, %v after it starts or last made progress", t)
	}
	deadline := base
	if reset && m > 0 {
		deadline += fmt.Sprintf(", and %v after it starts at the latest (max_timeout)", m)
	}
	client := fmt.Sprintf("by its client's timeout, %v after it starts", budget)
	switch {
	case t == 0 && budget == 0:
		return "by nothing but its answer or a cancel", nil
	case budget == 0:
		return deadline, nil
	case t == 0:
		return client, nil
	case budget <= t:
		never = append(never, fmt.Sprintf("timeout %v never ends a call: client_timeout %v ends it first", t, budget))
		if reset && m > 0 {
			never = append(never, fmt.Sprintf("max_timeout %v never ends a call: client_timeout %v ends it first", m, budget))
		}
		return client, never
	case !reset:
		return deadline, []string{fmt.Sprintf("client_timeout %v never ends a call: timeout %v ends it first", budget, t)}
	case m > 0 && m <= budget:
		return deadline, []string{fmt.Sprintf("client_timeout %v never ends a call: max_timeout %v ends every call first", budget, m)}
	case m > 0:
		never = []string{fmt.Sprintf("max_timeout %v never ends a call: client_timeout %v ends it first", m, budget)}
	}
	return fmt.Sprintf("%s (a quiet call), or %s (one that makes progress), whichever comes first", base, client), never
}

// layerWarnings warns of the timeouts of the defaults and of each rule
// that sets one that never end a call (a client_timeout of auto is
// explained, not warned of: its budget is the client's).
func (p *Policy) layerWarnings(prefix string) []*Problem {
	var out []*Problem
	check := func(at string, r *Rule) {
		e := resolve("", r, &p.Defaults)
		if e.ClientTimeout.Auto {
			return
		}
		_, never := layers(e, e.ClientTimeout.Wait)
		for _, n := range never {
			out = append(out, &Problem{Path: at, Msg: n})
		}
	}
	check(prefix+".defaults", &Rule{})
	for i := range p.Rules {
		r := &p.Rules[i]
		at := fmt.Sprintf("%s.rules[%d]", prefix, i)
		if r.ClientTimeout != nil && (r.ClientTimeout.Auto || r.ClientTimeout.Wait > 0) && r.Method != "" {
			if g, _ := compileGlob(r.Method); g != nil && !g.match("tools/call") {
				out = append(out, &Problem{Path: at + ".client_timeout", Msg: "never applies: client_timeout is for tools/call, and " + r.Method + " never matches it"})
			}
		}
		if r.Timeout != nil || r.MaxTimeout != nil || r.ResetOnProgress != nil || r.ClientTimeout != nil {
			check(at, r)
		}
	}
	return out
}

// Explain says, for the defaults and each rule, what ends a call: with
// client_timeout: auto, for each client of the table that gives up
// without a cancel, and for the others.
func (p *Policy) Explain() []string {
	ct := newClientTable(&p.ClientTimeouts)
	var out []string
	explain := func(name string, r *Rule) {
		e := resolve(name, r, &p.Defaults)
		if g, _ := compileGlob(r.Method); r.Method != "" && g != nil && !g.match("tools/call") {
			e.ClientTimeout = ClientTimeout{} // for tools/call only
		}
		if !e.ClientTimeout.Auto {
			ends, _ := layers(e, e.ClientTimeout.Wait)
			out = append(out, fmt.Sprintf("%s: a call is ended %s", name, ends))
			return
		}
		seen := map[string]bool{}
		for _, k := range ct.rows {
			if k.Cancels || seen[k.Name+k.From+k.Until] {
				continue
			}
			seen[k.Name+k.From+k.Until] = true
			ends, _ := layers(e, *k.Waits+ct.grace)
			out = append(out, fmt.Sprintf("%s: a call of %s is ended %s (client_timeout auto: it waits %v, and the grace %v)",
				name, versions(&k), ends, *k.Waits, ct.grace))
		}
		ends, _ := layers(e, 0)
		out = append(out, fmt.Sprintf("%s: a call of any other client is ended %s", name, ends))
	}
	explain("defaults", &Rule{})
	for i := range p.Rules {
		r := &p.Rules[i]
		explain(fmt.Sprintf("rules[%d] (%s)", i, cmp.Or(r.Tool, r.Method)), r)
	}
	return out
}

// versions names a row's client and its versions.
func versions(k *KnownClient) string {
	switch {
	case k.From != "" && k.Until != "":
		return fmt.Sprintf("%s %s to %s", k.Name, k.From, k.Until)
	case k.From != "":
		return fmt.Sprintf("%s %s and later", k.Name, k.From)
	case k.Until != "":
		return fmt.Sprintf("%s before %s", k.Name, k.Until)
	}
	return k.Name
}
