package upstream

import (
	"testing"
)

// TestSkipped: hop-by-hop headers and the extra names are skipped in any
// case, every other header is relayed, and none costs an allocation.
func TestSkipped(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"Connection", true}, {"TRANSFER-ENCODING", true}, {"proxy-authorization", true}, {"Te", true},
		{"Host", true}, {"content-length", true},
		{"Mcp-Session-Id", false}, {"Authorization", false}, {"T", false}, {"", false},
		{"Proxy-Authorization-And-More", false}, {"Connectio", false}, {"Hosts", false},
	} {
		if got := Skipped([]byte(tc.name), "host", "content-length"); got != tc.want {
			t.Errorf("Skipped(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
	name := []byte("Transfer-Encoding")
	if n := testing.AllocsPerRun(100, func() { Skipped(name, "host") }); n != 0 {
		t.Errorf("skipped allocates %v times", n)
	}
}
