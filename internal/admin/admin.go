// Package admin serves the operations listener (--admin): /healthz,
// /readyz, /metrics, the hook jobs' API (/hooks) and the status page, each
// behind the rules of who may use it.
package admin

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/connlimit"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/metrics"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/origin"
)

// TokenEnv is the environment variable that holds the admin
// listener's token when http.admin_token_file names no file.
const TokenEnv = "MCP_CANCEL_PROXY_ADMIN_TOKEN"

// adminGuard is who may use the admin listener. Every request meets the
// MCP endpoint's Host and Origin rules (a web page cannot reach it by DNS
// rebinding, nor post to it cross-site). /healthz, /readyz and /metrics
// are open beyond that, for probes and scrapers; /status, /events and
// /hooks show sessions, tools and jobs, and /hooks/retry and /hooks/drop change
// state, so they need the token whenever one is set, and always when the
// listener binds beyond loopback; state changes are POSTs with a JSON
// content type, which a web page cannot send cross-site without a CORS
// preflight that the listener never answers.
type adminGuard struct {
	loopback bool     // the listener binds loopback addresses only
	token    string   // "": none
	origins  []string // http.allowed_origins
}

// allow reports whether the request may go on; if not, it has answered it.
func (g *adminGuard) allow(ctx *fasthttp.RequestCtx) bool {
	if status, why := origin.Refuse(ctx, g.origins, g.loopback); status != 0 {
		ctx.Error(why+"\n", status)
		return false
	}
	path := string(ctx.Path())
	switch {
	case path == "/healthz" || path == "/readyz" || path == "/metrics":
		return true
	case g.token == "" && !g.loopback:
		ctx.Error("the admin listener binds beyond loopback: /status, /events and /hooks need a token "+
			"(http.admin_token_file, or "+TokenEnv+")\n", fasthttp.StatusForbidden)
		return false
	case g.token != "" && !g.tokenGiven(ctx):
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="mcp-cancel-proxy admin", Basic realm="mcp-cancel-proxy admin"`)
		ctx.Error("this endpoint needs the admin token: Authorization: Bearer TOKEN (or any user name and the token as password)\n",
			fasthttp.StatusUnauthorized)
		return false
	case path == "/hooks/retry" || path == "/hooks/drop":
		if !ctx.IsPost() {
			ctx.Error("POST, with Content-Type: application/json\n", fasthttp.StatusMethodNotAllowed)
			return false
		}
		if ct := string(ctx.Request.Header.ContentType()); !strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "application/json") {
			ctx.Error("a state change needs Content-Type: application/json\n", fasthttp.StatusUnsupportedMediaType)
			return false
		}
	}
	return true
}

// tokenGiven reports whether the request carries the token, as a bearer
// token or as a Basic password (what a browser prompts for).
func (g *adminGuard) tokenGiven(ctx *fasthttp.RequestCtx) bool {
	auth := string(ctx.Request.Header.Peek("Authorization"))
	scheme, cred, _ := strings.Cut(auth, " ")
	switch strings.ToLower(scheme) {
	case "bearer":
	case "basic":
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
		if err != nil {
			return false
		}
		_, cred, _ = strings.Cut(string(b), ":")
	default:
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(cred)), []byte(g.token)) == 1
}

// Token returns the admin token the configuration names: the file's
// content, else the environment variable's, else none.
func Token(h config.HTTP) (string, error) {
	if h.AdminTokenFile != "" {
		b, err := os.ReadFile(h.AdminTokenFile)
		if err != nil {
			return "", fmt.Errorf("http.admin_token_file: %w", err)
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("http.admin_token_file: %s is empty", h.AdminTokenFile)
	}
	return strings.TrimSpace(os.Getenv(TokenEnv)), nil
}

// onlyLoopback reports whether a listener's address is a loopback one.
func onlyLoopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

// Serve serves the operations endpoints, apart from the MCP listener:
// /healthz (the process serves), /readyz (ready() reports nil: the upstream
// is reachable), /metrics (Prometheus), /hooks (the hook store's jobs, once
// engine holds the policy engine), /status (a page of the cancels) and
// /events (the events feed, followed),
// behind an adminGuard. It returns a function that stops it.
func Serve(h config.HTTP, m *metrics.Metrics, ready func() error, engine *atomic.Pointer[policy.Engine], feed *events.Feed, log *zap.Logger) (stop func(), err error) {
	token, err := Token(h)
	if err != nil {
		return nil, err
	}
	tcp, err := net.Listen("tcp", h.Admin)
	if err != nil {
		return nil, err
	}
	return serveOn(tcp, token, h, m, ready, engine, feed, log), nil
}

// serveOn is Serve on a listener.
func serveOn(tcp net.Listener, token string, h config.HTTP, m *metrics.Metrics, ready func() error, engine *atomic.Pointer[policy.Engine], feed *events.Feed, log *zap.Logger) (stop func()) {
	// As the MCP listener's: accepts go on through a shortage of
	// descriptors, and a few clients cannot hold every connection.
	// A few connections are kept for /healthz and /readyz, so that a
	// liveness probe answers while every other connection is busy.
	ln := connlimit.New(tcp, connlimit.Options{Max: adminMaxConns, MaxPerClient: adminMaxConnsPerClient, Trusted: h.TrustedPrefixes(),
		Reserve: adminReserve, ReservedPaths: []string{"/healthz", "/readyz"}, Log: log})
	g := &adminGuard{loopback: onlyLoopback(ln.Addr()), token: token, origins: h.AllowedOrigins}
	if !g.loopback {
		log.Warn("the admin listener binds beyond loopback: /healthz, /readyz and /metrics are open to whoever reaches it; "+
			"/status, /events and /hooks need the admin token", zap.String("admin", ln.Addr().String()), zap.Bool("token_set", token != ""))
	}
	follow := &followers{feed: feed, done: make(chan struct{})}
	srv := &fasthttp.Server{Name: "mcp-cancel-proxy-admin", IdleTimeout: 60 * time.Second,
		Handler: ln.Handler(adminHandler(g, m, ready, engine, follow)), ConnState: ln.ConnState}
	connlimit.ReadTimeouts(srv, h.HeaderTimeout, 30*time.Second)
	go srv.Serve(ln)
	log.Info("admin listening", events.Mark(events.AdminListening), zap.String("admin", ln.Addr().String()))
	return func() {
		close(follow.done) // the /events streams end, so that Shutdown does not wait on them
		srv.Shutdown()
	}
}

// The admin listener's connection bounds: a scraper, a few status pages
// and events feeds need far fewer.
const (
	adminMaxConns          = 1024
	adminMaxConnsPerClient = 256
	adminReserve           = 16
)

// adminHandler answers the admin endpoints that g allows.
func adminHandler(g *adminGuard, m *metrics.Metrics, ready func() error, engine *atomic.Pointer[policy.Engine], follow *followers) fasthttp.RequestHandler {
	prom := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	return func(ctx *fasthttp.RequestCtx) {
		if !g.allow(ctx) {
			return
		}
		switch string(ctx.Path()) {
		case "/healthz":
			ctx.SetBodyString("ok\n")
		case "/readyz":
			if err := ready(); err != nil {
				ctx.Error("not ready: "+err.Error()+"\n", fasthttp.StatusServiceUnavailable)
				return
			}
			ctx.SetBodyString("ready\n")
		case "/metrics":
			prom(ctx)
		case "/hooks", "/hooks/retry", "/hooks/drop":
			serveHooks(ctx, engine)
		case "/status":
			serveStatus(ctx, engine)
		case "/events":
			follow.serve(ctx)
		default:
			ctx.Error("not found", fasthttp.StatusNotFound)
		}
	}
}

// ErrNoToken is the hooks command's error for an admin listener that
// wants a token it was not given.
var ErrNoToken = errors.New("the admin listener wants its token: --token-file FILE or " + TokenEnv)

// JobView is what the hooks command and the admin listener show of a job:
// never the hook's definition (its headers may hold credentials) nor the
// event (it may hold arguments).
type JobView struct {
	ID        string                     `json:"id"`
	State     string                     `json:"state"`
	Phase     string                     `json:"phase"`
	Tool      string                     `json:"tool,omitempty"`
	Target    string                     `json:"target"`
	Captured  map[string]json.RawMessage `json:"captured,omitempty"`
	Attempts  int                        `json:"attempts"`
	NextAt    *time.Time                 `json:"next_at,omitempty"`
	LastError string                     `json:"last_error,omitempty"`
	Created   time.Time                  `json:"created"`
}

// ViewOf returns the views of jobs.
func ViewOf(all []jobs.Job) []JobView {
	views := make([]JobView, 0, len(all))
	for _, j := range all {
		v := JobView{ID: j.ID, State: j.State, Phase: j.Phase, Tool: j.Tool, Target: j.Target, Captured: j.Captured,
			Attempts: j.Attempts, LastError: j.LastError, Created: j.Created}
		if j.State == jobs.Pending && !j.NextAt.IsZero() {
			v.NextAt = &j.NextAt
		}
		views = append(views, v)
	}
	return views
}

// serveHooks answers the admin listener's /hooks endpoints from the
// running engine: GET /hooks lists its jobs; POST /hooks/retry and
// /hooks/drop act on its orphans (?id=ID, or every one without it).
func serveHooks(ctx *fasthttp.RequestCtx, engine *atomic.Pointer[policy.Engine]) {
	e := engine.Load()
	if e == nil {
		ctx.Error("the policy has not started\n", fasthttp.StatusServiceUnavailable)
		return
	}
	id := string(ctx.QueryArgs().Peek("id"))
	var body any
	var err error
	switch path, post := string(ctx.Path()), ctx.IsPost(); {
	case path == "/hooks" && !post:
		var all []jobs.Job
		all, err = e.Jobs()
		body = map[string]any{"jobs": ViewOf(all)}
	case path == "/hooks/retry" && post:
		var n int
		n, err = e.RetryJobs(id)
		body = map[string]int{"retried": n}
	case path == "/hooks/drop" && post:
		var n int
		n, err = e.DropJobs(id)
		body = map[string]int{"dropped": n}
	default:
		ctx.Error("GET /hooks, POST /hooks/retry or /hooks/drop (?id=ID)\n", fasthttp.StatusMethodNotAllowed)
		return
	}
	if err != nil {
		ctx.Error(err.Error()+"\n", fasthttp.StatusConflict)
		return
	}
	b, _ := json.Marshal(body)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}
