package policy

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// ClientTimeout is a rule's client_timeout: how long the rule's client
// waits for a call before it gives up on it without a word. When it
// passes with the call neither answered nor cancelled, the proxy ends the
// call as a deadline does. In the file: a duration, auto (the client's
// own, from the table of known clients) or off.
type ClientTimeout struct {
	// Auto takes the budget from the table of known clients
	// (ClientTimeouts), by the client's name and version.
	Auto bool
	// Wait is a fixed budget; 0 with Auto unset is off.
	Wait time.Duration
}

// UnmarshalYAML implements yaml.Unmarshaler: a duration, auto or off.
func (c *ClientTimeout) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: client_timeout is a duration, auto or off", n.Line)
	}
	switch n.Value {
	case "auto":
		*c = ClientTimeout{Auto: true}
		return nil
	case "off", "0":
		*c = ClientTimeout{}
		return nil
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: client_timeout %q is not a duration, auto or off", n.Line, cut(n.Value, 100))
	}
	*c = ClientTimeout{Wait: d}
	return nil
}

// ClientTimeouts is the policy's client_timeouts section: what
// client_timeout: auto knows of clients.
type ClientTimeouts struct {
	// Grace is added to a known client's wait before its call is
	// cancelled: the client gives up first, and the proxy is sure of it.
	// Default 30s.
	Grace *time.Duration `yaml:"grace"`
	// Clients are rows tried before the bundled table's (clients.yaml):
	// to add a client, or to say how long one waits under your settings.
	Clients []KnownClient `yaml:"clients"`
}

// DefaultClientGrace is client_timeouts.grace by default.
const DefaultClientGrace = 30 * time.Second

// KnownClient is one row of the table of clients: a client by the name it
// gives itself, in a range of its versions, and how it gives up on a call.
type KnownClient struct {
	// Name is clientInfo.name, exactly.
	Name string `yaml:"name"`
	// From is the first version the row holds for, Until the first it no
	// longer does; empty: no bound.
	From  string `yaml:"from"`
	Until string `yaml:"until"`
	// Waits is how long the client waits for a tool call before it gives
	// up without a cancel.
	Waits *time.Duration `yaml:"waits"`
	// Cancels says the client cancels what it gives up on (or moves long
	// calls to the background): auto leaves its calls alone.
	Cancels bool `yaml:"cancels"`
	// Source says where the row comes from: the client's code, docs or
	// issue tracker.
	Source string `yaml:"source"`
}

//go:embed clients.yaml
var bundledClients []byte

// BundledClients returns the table of known clients the proxy ships with.
var BundledClients = sync.OnceValue(func() []KnownClient {
	var rows []KnownClient
	if err := yaml.Unmarshal(bundledClients, &rows); err != nil {
		panic("policy: clients.yaml: " + err.Error()) // a test reads it
	}
	return rows
})

// validate checks the section.
func (t *ClientTimeouts) validate(at string, bad func(at, format string, a ...any)) {
	if t.Grace != nil && *t.Grace < 0 {
		bad(at+".grace", "must not be negative, got %v", *t.Grace)
	}
	for i := range t.Clients {
		t.Clients[i].validate(fmt.Sprintf("%s.clients[%d]", at, i), bad)
	}
}

// validate checks one row.
func (k *KnownClient) validate(at string, bad func(at, format string, a ...any)) {
	if k.Name == "" {
		bad(at+".name", "a row needs the client's name, as its clientInfo gives it")
	}
	switch {
	case k.Waits == nil && !k.Cancels:
		bad(at, "a row needs waits: DURATION or cancels: true")
	case k.Waits != nil && k.Cancels:
		bad(at, "a row has waits or cancels: true, not both")
	case k.Waits != nil && *k.Waits <= 0:
		bad(at+".waits", "must be positive, got %v", *k.Waits)
	}
	for key, v := range map[string]string{"from": k.From, "until": k.Until} {
		if v != "" && !validVersion(v) {
			bad(at+"."+key, "%q is not a version of dot-separated numbers (1.2.3)", v)
		}
	}
	if k.From != "" && k.Until != "" && validVersion(k.From) && validVersion(k.Until) && compareVersions(k.From, k.Until) >= 0 {
		bad(at+".until", "%s is not after from %s", k.Until, k.From)
	}
}

// holds reports whether the row is about the client named, at version.
func (k *KnownClient) holds(name, version string) bool {
	if k.Name != name {
		return false
	}
	if k.From == "" && k.Until == "" {
		return true
	}
	if !validVersion(version) { // a bounded row says nothing of an unknown version
		return false
	}
	return (k.From == "" || compareVersions(version, k.From) >= 0) && (k.Until == "" || compareVersions(version, k.Until) < 0)
}

// clientTable is the rows auto consults, the configuration's first, and
// the grace.
type clientTable struct {
	rows  []KnownClient
	grace time.Duration
}

// newClientTable is t's rows before the bundled ones.
func newClientTable(t *ClientTimeouts) *clientTable {
	ct := &clientTable{grace: orDefault(t.Grace, DefaultClientGrace)}
	ct.rows = append(append(ct.rows, t.Clients...), BundledClients()...)
	return ct
}

// budget returns how long auto lets a call of the client named at version
// run (its wait and the grace), and the row that says so; 0 for a client
// that cancels or that the table does not know.
func (ct *clientTable) budget(c clientInfo) (time.Duration, *KnownClient) {
	for i := range ct.rows {
		if k := &ct.rows[i]; k.holds(c.Name, c.Version) {
			if k.Cancels {
				return 0, k
			}
			return *k.Waits + ct.grace, k
		}
	}
	return 0, nil
}

// clientInfo is the client's name and version, as it gives them.
type clientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// String is "name version", or "" when the client gave no name.
func (c clientInfo) String() string {
	if c.Name == "" {
		return ""
	}
	return strings.TrimSpace(c.Name + " " + c.Version)
}

// clientOf reads the client's name and version from m: an initialize's
// params.clientInfo, or a request's params._meta clientInfo (protocol
// 2026-07-28, where each request says who sent it).
func clientOf(m *framing.Message) clientInfo {
	// Only params (initialize) or params._meta is read, where the parse
	// found it: never the call's arguments.
	var in struct {
		ClientInfo clientInfo `json:"clientInfo"`
		Meta       clientInfo `json:"io.modelcontextprotocol/clientInfo"`
	}
	span := m.MetaSpan
	if m.Method == framing.MethodInitialize {
		span = m.ParamsSpan
	}
	if !span.Found() || json.Unmarshal(m.Raw[span.Start:span.End], &in) != nil {
		return clientInfo{}
	}
	c := in.Meta
	if m.Method == framing.MethodInitialize {
		c = in.ClientInfo
	}
	// Shown on the status page and in log lines: a name of a megabyte is
	// not kept whole (nor can it match a row).
	c.Name, c.Version = cut(c.Name, clientInfoMax), cut(c.Version, clientInfoMax)
	return c
}

// clientInfoMax bounds the client's name and version, as kept.
const clientInfoMax = 128

// validVersion reports whether v is dot-separated numbers, with an
// optional suffix after the last (a pre-release, a build: "1.2.3-rc1").
func validVersion(v string) bool {
	_, ok := versionParts(v)
	return ok
}

// versionParts splits v into its numbers, a suffix after them ignored.
func versionParts(v string) ([]uint64, bool) {
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+ "); i >= 0 {
		v = v[:i]
	}
	if v == "" || len(v) > 64 {
		return nil, false
	}
	var out []uint64
	for p := range strings.SplitSeq(v, ".") {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return nil, false
		}
		out = append(out, n)
	}
	return out, true
}

// compareVersions compares two valid versions number by number, a missing
// number counting as 0 ("1.2" is "1.2.0").
func compareVersions(a, b string) int {
	pa, _ := versionParts(a)
	pb, _ := versionParts(b)
	for i := range max(len(pa), len(pb)) {
		var x, y uint64
		if i < len(pa) {
			x = pa[i]
		}
		if i < len(pb) {
			y = pb[i]
		}
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
	}
	return 0
}
