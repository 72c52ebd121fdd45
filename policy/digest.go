package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// Digest names a hook by what it runs: the SHA-256 of the canonical form of
// its exec argv, or of its URL, method and headers, with its timeouts and
// retries. A hook job carries its hook's digest, never the definition, and
// a proxy runs a job only with a hook of its own configuration that has
// that digest: a job read from the fleet's queue or from another process's
// store file can trigger this proxy's hooks, but can never make it run a
// command or call a URL that its configuration does not name.
func (h *Hook) Digest() string {
	type header struct{ Name, Value string }
	c := struct {
		Exec        []string      `json:"exec,omitempty"`
		URL         string        `json:"url,omitempty"`
		Method      string        `json:"method,omitempty"`
		Headers     []header      `json:"headers,omitempty"`
		Timeout     time.Duration `json:"timeout"`
		HTTPTimeout time.Duration `json:"http_timeout,omitempty"`
		Retries     int           `json:"retries"`
	}{Exec: h.Exec, Timeout: h.Timeout, Retries: h.Retries}
	if h.HTTP != nil {
		c.URL, c.Method, c.HTTPTimeout = h.HTTP.URL, "POST", h.HTTP.Timeout
		for k, v := range h.HTTP.Headers {
			c.Headers = append(c.Headers, header{strings.ToLower(k), v})
		}
		slices.SortFunc(c.Headers, func(a, b header) int { return strings.Compare(a.Name, b.Name) })
	}
	b, _ := json.Marshal(&c) // strings, numbers and slices of them: cannot fail
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// hooksOf returns the hooks of a policy by digest.
func hooksOf(p *Policy) map[string]*Hook {
	out := map[string]*Hook{}
	for _, r := range append([]Rule{p.Defaults}, p.Rules...) {
		for _, h := range []*Hook{r.OnCancel, r.OnTimeout, r.OnLateResult, r.OnLateError} {
			if h != nil {
				out[h.Digest()] = h
			}
		}
	}
	return out
}

// MaxRetries returns the most retries any hook of the policy has.
func (p *Policy) MaxRetries() int {
	n := 0
	for _, h := range hooksOf(p) {
		n = max(n, h.Retries)
	}
	return n
}
