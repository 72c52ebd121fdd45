package policy

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// A client timeout (a rule's client_timeout) ends a tool call its client
// gave up on without a word: many clients stop waiting at a timeout of
// their own and move on, and never tell the server. When the budget
// passes with the call neither answered nor cancelled, the governor ends
// it as a deadline does (Actions.Expire, with the source client_timeout).
// The budget is the rule's, or, with auto, the client's own wait from the
// table of known clients (clients.go) and a grace; auto stops applying in
// a session whose client has sent a cancel: it shows it cancels.

// initialize notes who the session's client says it is.
func (g *governor) initialize(m *framing.Message) {
	c := clientOf(m)
	g.mu.Lock()
	g.client = c
	g.mu.Unlock()
}

// budgetLocked returns how long a tools/call of rule may run before its
// client gives up on it (0: no client timeout), and whether the table of
// known clients said so.
func (g *governor) budgetLocked(rule *Effective, m *framing.Message) (time.Duration, bool) {
	ct := rule.ClientTimeout
	if !ct.Auto {
		return ct.Wait, false
	}
	if g.cancels {
		return 0, true
	}
	c := g.client
	if c.Name == "" { // no initialize: in 2026-07-28 each request says who sent it
		c = clientOf(m)
	}
	b, _ := g.e.m.Load().clients.budget(c)
	return b, true
}

// cancelsLocked notes that the session's client sent a cancel: auto no
// longer applies, to its calls in flight as to those to come.
func (g *governor) cancelsLocked() {
	if g.cancels {
		return
	}
	g.cancels = true
	for _, r := range g.calls {
		if r.auto && r.ctimer != nil {
			r.ctimer.Stop()
			r.cgen++
		}
	}
}

// armClientLocked (re)sets r's client timeout to at.
func (g *governor) armClientLocked(r *record, at time.Time) {
	r.cdeadline = at
	g.rearmLocked(&r.ctimer, &r.cgen, at, func(gen int) { g.clientExpire(r, gen) })
}

// clientExpire acts on r's client timeout: the call is cancelled as at a
// deadline, and its client answered with the proxy's error, unless it
// ended meanwhile, or a re-issue that joined it still waits (reissue:
// join), whose own budget then counts.
func (g *governor) clientExpire(r *record, gen int) {
	g.mu.Lock()
	stale := gen != r.cgen || r.st.phase >= phaseCancelled || g.closed || !r.answered.IsZero()
	if j := g.joins.Load(); !stale && j != nil {
		if until, ok := j.waitedOn(r.c); !ok || until.After(g.e.clock.Now()) {
			stale = true
			if ok {
				g.armClientLocked(r, until)
			}
		}
	}
	g.mu.Unlock()
	if stale {
		return
	}
	g.e.metrics.ClientTimeoutFired(r.auto)
	g.log().Info("client timeout passed: cancelling", events.Mark(events.ClientTimeoutPassed), zap.String("method", r.method),
		zap.String("tool", r.tool), zap.ByteString("id", r.id), r.correlationField(), zap.Stringer("client", g.clientOf()),
		zap.Duration("timeout", r.budget), zap.Bool("auto", r.auto))
	g.act.Expire(r.c, proxy.SourceClientTimeout, clientTimeoutReason(r.budget, r.rule.Name), proxy.ClientTimeoutReply(r.c.ID(), r.budget.String()))
}

// clientOf is who the session's client says it is.
func (g *governor) clientOf() clientInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.client
}

// clientTimeoutReason is the reason of a client timeout's cancel.
func clientTimeoutReason(budget time.Duration, rule string) string {
	return fmt.Sprintf("its client's timeout of %v passed (client_timeout, rule %s)", budget, rule)
}
