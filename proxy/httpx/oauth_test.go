package httpx_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// protectedUpstream is an MCP server that wants a bearer token (MCP
// authorization): its 401 names its protected resource metadata, which
// names it as the resource. It records the Authorization it was sent.
func protectedUpstream(t *testing.T) (url string, auth chan string) {
	auth = make(chan string, 4)
	var srv *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mcp", func(w http.ResponseWriter, r *http.Request) {
		auth <- r.Header.Get("Authorization")
		if r.Header.Get("Authorization") != "Bearer good" {
			w.Header().Add("WWW-Authenticate", `Bearer resource_metadata="`+srv.URL+`/.well-known/oauth-protected-resource/mcp", scope="mcp:tools"`)
			w.Header().Add("WWW-Authenticate", `Basic realm="other"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	})
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, `{"resource":"`+srv.URL+`/mcp","authorization_servers":["https://auth.example.com"],"scopes_supported":["mcp:tools"]}`)
	})
	srv = httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp", auth
}

// TestSidecarTransparentToOAuth: a client doing its own OAuth through the
// sidecar gets the upstream's 401, every challenge kept, with
// resource_metadata pointing at the sidecar; the sidecar relays that
// metadata from the upstream, naming its own endpoint as the resource
// (so that the client's RFC 9728 check passes); and the client's token
// reaches the upstream as it is. With http.public_url, the names are
// under it. Without the relay the discovery path was 404 and the
// challenge named the upstream.
func TestSidecarTransparentToOAuth(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up, auth := protectedUpstream(t)
	for _, public := range []string{"", "https://mcp.example.com"} {
		front := serveSidecar(t, &httpx.Sidecar{Upstream: up, PublicURL: public})
		base := strings.TrimSuffix(front, "/mcp")
		if public != "" {
			base = public
		}
		post := func(token string) *http.Response {
			req, _ := http.NewRequest(http.MethodPost, front, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if token != "" {
				req.Header.Set("Authorization", token)
			}
			resp, err := testClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}
		resp := post("")
		<-auth
		challenges := resp.Header.Values("WWW-Authenticate")
		want := `Bearer resource_metadata="` + base + `/.well-known/oauth-protected-resource/mcp", scope="mcp:tools"`
		if resp.StatusCode != http.StatusUnauthorized || len(challenges) != 2 || challenges[0] != want || challenges[1] != `Basic realm="other"` {
			t.Fatalf("public_url %q: %d %q, want 401 with %q and the Basic challenge", public, resp.StatusCode, challenges, want)
		}

		meta, err := testClient.Get(strings.TrimSuffix(front, "/mcp") + "/.well-known/oauth-protected-resource/mcp")
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			ScopesSupported      []string `json:"scopes_supported"`
		}
		err = json.NewDecoder(meta.Body).Decode(&doc)
		meta.Body.Close()
		if err != nil || meta.StatusCode != http.StatusOK || doc.Resource != base+"/mcp" || len(doc.AuthorizationServers) != 1 ||
			doc.AuthorizationServers[0] != "https://auth.example.com" || len(doc.ScopesSupported) != 1 || meta.Header.Get("Cache-Control") != "max-age=60" {
			t.Fatalf("public_url %q: metadata %d %+v (%v), want the upstream's with resource %s/mcp", public, meta.StatusCode, doc, err, base)
		}

		if resp := post("Bearer good"); resp.StatusCode != http.StatusOK || <-auth != "Bearer good" {
			t.Fatalf("public_url %q: with the token: %d, want 200 and the token upstream", public, resp.StatusCode)
		}
	}
}

// TestResourceMetadataEdges: the metadata of a stdio server behind the
// sidecar is 404 (it has no OAuth); a POST to the discovery path is 405;
// a path that only begins like it is not it.
func TestResourceMetadataEdges(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up, _ := protectedUpstream(t)
	front := strings.TrimSuffix(serveSidecar(t, &httpx.Sidecar{Upstream: up}), "/mcp")
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodPost, "/.well-known/oauth-protected-resource/mcp", http.StatusMethodNotAllowed},
		{http.MethodGet, "/.well-known/oauth-protected-resourcex", http.StatusNotFound},
		{http.MethodGet, "/.well-known/oauth-protected-resource", http.StatusNotFound}, // the upstream has none at its root
	} {
		req, _ := http.NewRequest(tc.method, front+tc.path, nil)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
	stdio := strings.TrimSuffix(serveSidecar(t, &httpx.Sidecar{Children: &httpx.Children{Dial: &upstream.Command{Argv: []string{"true"}}}}), "/mcp")
	resp, err := testClient.Get(stdio + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a stdio server's metadata: %d, want 404", resp.StatusCode)
	}
}
