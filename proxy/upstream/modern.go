package upstream

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

const (
	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientInfo         = "io.modelcontextprotocol/clientInfo"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
)

// discoverRequest asks a server which revisions it speaks, in 2026-07-28.
var discoverRequest = []byte(`{"jsonrpc":"2.0","id":"mcp-cancel-proxy-discover","method":"server/discover","params":{"_meta":{"` +
	metaProtocolVersion + `":"` + string(framing.RevisionStateless) + `","` + metaClientCapabilities + `":{}}}}`)

// discoverWait bounds the wait for an answer to server/discover.
const discoverWait = 5 * time.Second

// probeModern asks a stateless upstream whether it speaks 2026-07-28
// (once for every session of it: Modern), and sets c.modern if it does.
func (c *StreamConn) probeModern() {
	if !c.u.Modern(c.log) {
		return
	}
	c.mu.Lock()
	c.modern = true
	c.mu.Unlock()
}

// Asked is a fact of a server's that its clients ask once for all (whether
// it speaks 2026-07-28, which transport it speaks), again after a failure
// to ask: one question at a time, the answer kept.
type Asked[T any] struct {
	mu   sync.Mutex // held while asking
	done atomic.Bool
	v    T // set before done
}

// Get returns the answer, asking with ask if there is none yet; a failed
// ask gives the zero value, and the next Get asks again.
func (a *Asked[T]) Get(ask func() (T, error)) T {
	if a.done.Load() {
		return a.v
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.done.Load() {
		v, err := ask()
		if err != nil {
			var zero T
			return zero
		}
		a.v = v
		a.done.Store(true)
	}
	return a.v
}

// Modern reports whether the stateless server speaks 2026-07-28, asking it
// once for every client of it (again after a failure to ask): the relay's
// 2025 requests without a session and each session of lines are sent as
// 2026-07-28 ones when it does, so that a closed stream cancels them.
func (u *StreamableUpstream) Modern(log *zap.Logger) bool {
	return u.modern.Get(func() (bool, error) {
		yes, err := u.SpeaksModern(log)
		if yes {
			log.Info("stateless upstream speaks protocol 2026-07-28: requests of 2025 clients without a session are sent as such, so that a closed stream cancels them", events.Mark(events.UpstreamStateless))
		}
		return yes, err
	})
}

// SpeaksModern asks the server, with server/discover, whether it speaks
// 2026-07-28; each wait is bounded by discoverWait. An error says the
// server could not be asked.
func (e *Endpoint) SpeaksModern(log *zap.Logger) (bool, error) {
	var f framing.Frame
	f.Parse(discoverRequest)
	resp, err := e.Do(Request{Body: discoverRequest, Version: string(framing.RevisionStateless), Msg: &f.Msgs[0]}, discoverWait)
	if err != nil {
		log.Info("stateless upstream: server/discover unanswered", zap.String("error", Brief(err)))
		return false, err
	}
	var data []byte
	if IsEventStream(resp.Header.ContentType()) {
		body := BodyOf(resp)
		cut := time.AfterFunc(discoverWait, func() { body.CloseWithError(errSSEStopped) })
		rd := framing.NewSSEReader(body, 1<<20)
		for { // to the end, which gives the connection back for reuse
			ev, err := rd.Next()
			if err != nil {
				break
			}
			if ev.HasData && data == nil {
				data = append([]byte(nil), ev.Data...)
			}
		}
		cut.Stop()
		rd.Release()
		resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
	} else {
		data = ReadHead(resp)
	}
	var r struct {
		Result struct {
			SupportedVersions []string `json:"supportedVersions"`
		} `json:"result"`
	}
	if json.Unmarshal(data, &r) != nil || !slices.Contains(r.Result.SupportedVersions, string(framing.RevisionStateless)) {
		log.Info("stateless upstream without protocol 2026-07-28: a cancel closes the request's stream, which it may not take as one")
		return false, nil
	}
	return true, nil
}

// modernizable reports whether a request of the 2025 revisions exists in
// 2026-07-28 too; those removed from it (initialize, ping, logging level,
// subscriptions) are sent as they are.
func Modernizable(method string) bool {
	switch method {
	case framing.MethodInitialize, "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe":
		return false
	}
	return true
}

// modernize returns the request m with the 2026-07-28 fields in its
// params._meta: the protocol version, and the client's info and
// capabilities (empty: a stateless server sends the client no requests)
// where the request has none. The fields are spliced in: every other byte
// of the request (its id, method and arguments) goes as the client wrote
// it. Params or _meta that are not objects (or null) are an error: the
// request then goes as it is.
func Modernize(m *framing.Message, clientInfo json.RawMessage) ([]byte, error) {
	raw, meta := m.Raw, m.MetaSpan
	if meta.Found() && raw[meta.Start] == '{' &&
		(bytes.Contains(raw[meta.Start:meta.End], []byte("modelcontextprotocol")) || bytes.IndexByte(raw[meta.Start:meta.End], '\\') >= 0) {
		return mergeMeta(raw, meta, clientInfo)
	}
	fields := make([]byte, 0, 120+len(clientInfo))
	fields = append(fields, `"`+metaProtocolVersion+`":"`+string(framing.RevisionStateless)+`","`+metaClientCapabilities+`":{}`...)
	if len(clientInfo) > 0 {
		fields = append(fields, `,"`+metaClientInfo+`":`...)
		fields = append(fields, clientInfo...)
	}
	return framing.AddMeta(m, fields)
}

// mergeMeta handles a _meta that may already hold some of the 2026-07-28
// fields (or spells a key with escapes): it is decoded and written again,
// the protocol version set, the client's own info and capabilities kept.
func mergeMeta(raw []byte, meta framing.Span, clientInfo json.RawMessage) ([]byte, error) {
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(raw[meta.Start:meta.End], &fields); err != nil {
		return nil, err
	}
	fields[metaProtocolVersion] = json.RawMessage(`"` + string(framing.RevisionStateless) + `"`)
	if _, ok := fields[metaClientCapabilities]; !ok {
		fields[metaClientCapabilities] = json.RawMessage(`{}`)
	}
	if _, ok := fields[metaClientInfo]; !ok && len(clientInfo) > 0 {
		fields[metaClientInfo] = clientInfo
	}
	var b bytes.Buffer
	b.Write(raw[:meta.Start])
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fields); err != nil {
		return nil, err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	b.Write(raw[meta.End:])
	return b.Bytes(), nil
}

// clientInfoOf returns the clientInfo of an initialize request, if valid.
func clientInfoOf(m *framing.Message) json.RawMessage {
	var req struct {
		Params struct {
			ClientInfo json.RawMessage `json:"clientInfo"`
		} `json:"params"`
	}
	if json.Unmarshal(m.Raw, &req) != nil || !json.Valid(req.Params.ClientInfo) {
		return nil
	}
	return req.Params.ClientInfo
}

// Downgrade returns a 2026-07-28 answer (a message, or a batch) in
// the shape of the 2025 revisions, for a client whose request was sent
// upgraded: a result's "resultType": "complete", which that client never
// asked for, is taken out. Anything else goes as it is.
func Downgrade(b []byte) []byte {
	if !bytes.Contains(b, []byte(`"resultType"`)) {
		return b
	}
	var msg map[string]json.RawMessage
	if json.Unmarshal(b, &msg) != nil {
		return b
	}
	var result map[string]json.RawMessage
	if json.Unmarshal(msg["result"], &result) != nil || string(result["resultType"]) != `"complete"` {
		return b
	}
	delete(result, "resultType")
	var err error
	if msg["result"], err = json.Marshal(result); err != nil {
		return b
	}
	out, err := json.Marshal(msg)
	if err != nil {
		return b
	}
	return out
}
