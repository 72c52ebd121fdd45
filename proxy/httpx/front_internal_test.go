package httpx

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// TestSweepRunsUntilCleanup: the sidecar's one sweep runs every quarter of
// the idle period on its clock, over every kind of session, and stops at
// Cleanup.
func TestSweepRunsUntilCleanup(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(0, 0))
	s := &Sidecar{Children: &Children{Dial: &upstream.Command{Argv: []string{"true"}}}, Legacy: &Legacy{}, SessionIdle: time.Hour, Clock: clk}
	if err := s.Provision(); err != nil {
		t.Fatal(err)
	}
	if clk.Pending() != 1 {
		t.Fatalf("%d timers after Provision, want the sweep's", clk.Pending())
	}
	relay{s}.adopt("x", newSession("", s, false, netip.Addr{}), new(bool))
	clk.Advance(2 * time.Hour)
	if s.Sessions() != 0 {
		t.Error("the idle session was not swept")
	}
	s.Cleanup("done")
	if clk.Pending() != 0 {
		t.Errorf("%d timers after Cleanup, want none", clk.Pending())
	}
}

// TestPeerIsWhatTheSidecarCanTrust: a session's peer, for fairness at the
// caps, is its address; an Authorization header, which the sidecar cannot
// verify, changes nothing (one client inventing one per session evicted
// all of a victim's idle sessions before, issue 40, item 6); behind a
// trusted proxy, the last X-Forwarded-For address that is not a trusted
// proxy's; an untrusted sender's X-Forwarded-For is ignored.
func TestPeerIsWhatTheSidecarCanTrust(t *testing.T) {
	t.Parallel()
	s := &Sidecar{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	peer := func(from string, headers ...string) string {
		var req fasthttp.Request
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Add(headers[i], headers[i+1])
		}
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(from)), nil)
		return s.peerOf(&ctx)
	}
	for _, c := range []struct {
		from    string
		headers []string
		want    string
	}{
		{"192.0.2.7:4000", nil, "address:192.0.2.7"},
		{"192.0.2.7:4000", []string{"Authorization", "Bearer invented-1"}, "address:192.0.2.7"},
		{"192.0.2.7:4000", []string{"X-Forwarded-For", "198.51.100.9"}, "address:192.0.2.7"},
		{"10.0.0.2:4000", []string{"X-Forwarded-For", "198.51.100.9"}, "address:198.51.100.9"},
		{"10.0.0.2:4000", []string{"X-Forwarded-For", "203.0.113.5, 198.51.100.9, 10.1.1.1"}, "address:198.51.100.9"},
		{"10.0.0.2:4000", []string{"X-Forwarded-For", "203.0.113.5", "X-Forwarded-For", "198.51.100.9"}, "address:198.51.100.9"},
		{"10.0.0.2:4000", []string{"X-Forwarded-For", "not-an-address, 10.1.1.1"}, "address:10.0.0.2"},
		{"10.0.0.2:4000", nil, "address:10.0.0.2"},
	} {
		if got := peer(c.from, c.headers...); got != c.want {
			t.Errorf("from %s with %q: %s, want %s", c.from, c.headers, got, c.want)
		}
	}
}
