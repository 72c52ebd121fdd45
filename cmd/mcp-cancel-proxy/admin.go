package main

import (
	"net"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/metrics"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
)

// admin serves the operations endpoints, apart from the MCP listener:
// /healthz (the process serves), /readyz (ready() reports nil: the upstream
// is reachable), /metrics (Prometheus), /hooks (the hook store's jobs, once
// engine holds the policy engine) and /status (a page of the cancels). It returns a function that stops it.
func admin(addr string, m *metrics.Metrics, ready func() error, engine *atomic.Pointer[policy.Engine], log *zap.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	prom := fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	srv := &fasthttp.Server{
		Name: "mcp-cancel-proxy-admin", ReadTimeout: readTimeout, IdleTimeout: idleTimeout,
		Handler: func(ctx *fasthttp.RequestCtx) {
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
			default:
				ctx.Error("not found", fasthttp.StatusNotFound)
			}
		},
	}
	go srv.Serve(ln)
	log.Info("admin listening", zap.String("admin", ln.Addr().String()))
	return func() { srv.Shutdown() }, nil
}
