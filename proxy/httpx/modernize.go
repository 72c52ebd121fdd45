package httpx

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// A client of the 2025 revisions can cancel a request of a stateless
// upstream only by closing the request's stream: a POSTed cancel names no
// session there, so it finds nothing. Servers take a closed stream as the
// cancel of a 2026-07-28 request (the go-sdk, for instance, only of such
// a request). So when a stateless upstream answers server/discover with
// 2026-07-28 among its versions, the backend sends the session's requests
// as 2026-07-28 ones: the protocol version, the client's info and
// capabilities in params._meta (SEP-2575), and the headers that mirror
// them. The client still speaks its revision; what it gets back is the
// same kind of answer.

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

// probeModern asks a stateless upstream whether it speaks 2026-07-28, and
// sets b.modern if it does.
func (b *streamBackend) probeModern() {
	var f framing.Frame
	if f.Parse(discoverRequest) != nil {
		return
	}
	resp, err := b.requestWithin(discoverWait, fasthttp.MethodPost, discoverRequest, "", &f.Msgs[0])
	if err != nil {
		b.log.Info("stateless upstream: server/discover unanswered", zap.String("error", brief(err)))
		return
	}
	var data []byte
	if isEventStream(resp.Header.ContentType()) {
		body := bodyOf(resp)
		cut := time.AfterFunc(discoverWait, func() { body.CloseWithError(errSSEStopped) })
		defer cut.Stop()
		rd := framing.NewSSEReader(body, 1<<20)
		for data == nil {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			if ev.HasData {
				data = append([]byte(nil), ev.Data...)
			}
		}
		rd.Release()
		resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
	} else {
		data = readHead(resp)
	}
	var r struct {
		Result struct {
			SupportedVersions []string `json:"supportedVersions"`
		} `json:"result"`
	}
	if json.Unmarshal(data, &r) != nil || !slices.Contains(r.Result.SupportedVersions, string(framing.RevisionStateless)) {
		b.log.Info("stateless upstream without protocol 2026-07-28: a cancel closes the request's stream, which it may not take as one")
		return
	}
	b.mu.Lock()
	b.modern = true
	b.mu.Unlock()
	b.log.Info("stateless upstream speaks protocol 2026-07-28: this session's requests are sent as such, so that a closed stream cancels them")
}

// modernizable reports whether a request of the 2025 revisions exists in
// 2026-07-28 too; those removed from it (initialize, ping, logging level,
// subscriptions) are sent as they are.
func modernizable(method string) bool {
	switch method {
	case framing.MethodInitialize, "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe":
		return false
	}
	return true
}

// modernize returns a request with the 2026-07-28 fields in its
// params._meta: the protocol version, and the client's info and
// capabilities (empty: a stateless server sends the client no requests)
// where the request has none.
func modernize(msg []byte, clientInfo json.RawMessage) ([]byte, error) {
	var env map[string]json.RawMessage
	if err := json.Unmarshal(msg, &env); err != nil {
		return nil, err
	}
	params := map[string]json.RawMessage{}
	if raw, ok := env["params"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &params); err != nil {
			return nil, err
		}
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := params["_meta"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, err
		}
	}
	meta[metaProtocolVersion] = json.RawMessage(`"` + string(framing.RevisionStateless) + `"`)
	if _, ok := meta[metaClientCapabilities]; !ok {
		meta[metaClientCapabilities] = json.RawMessage(`{}`)
	}
	if _, ok := meta[metaClientInfo]; !ok && len(clientInfo) > 0 {
		meta[metaClientInfo] = clientInfo
	}
	var err error
	if params["_meta"], err = json.Marshal(meta); err != nil {
		return nil, err
	}
	if env["params"], err = json.Marshal(params); err != nil {
		return nil, err
	}
	return json.Marshal(env)
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
