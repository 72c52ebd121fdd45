package proxy

import "testing"

// TestSubscriptionNotificationsAreAboutTheirListen: a notification that
// names a subscriptions/listen in flight (its _meta subscriptionId) is
// about that request (Outcome.For: the line sessions send it on the
// listen's stream); one that names none is about nothing, as before.
func TestSubscriptionNotificationsAreAboutTheirListen(t *testing.T) {
	st := newSilenceTracker()
	st.passes(t, Client, `{"jsonrpc":"2.0","id":"sub","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}`)
	o, _ := st.decide(t, Server, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"sub"}}}`)
	if o.For == nil || o.For.ID().String() != `"sub"` || o.Rewritten != nil || o.Last {
		t.Errorf("a subscription's notification: For %v, Rewritten %s, Last %v", o.For, o.Rewritten, o.Last)
	}
	o, _ = st.decide(t, Server, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"other"}}}`)
	if o.For != nil || o.Verdict != Forward {
		t.Errorf("a notification of no listen in flight: For %v, verdict %d", o.For, o.Verdict)
	}
}
