// Command mcpgoserver is a small stdio MCP server on mark3labs/mcp-go, the
// other popular Go SDK, used by mcp-cancel-proxy's end-to-end tests: when a
// call is cancelled, mcp-go cancels the handler's context but still writes
// a response, which the proxy must keep from the client. With -http ADDR it
// serves Streamable HTTP at /mcp instead of stdio; with -sse ADDR, the
// 2024-11-05 HTTP+SSE transport (GET /sse, POST /message). Its tools are
// wait_for_cancel and slow.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func main() {
	httpAddr := flag.String("http", "", "serve Streamable HTTP on this address (at /mcp) instead of stdio")
	sseAddr := flag.String("sse", "", "serve the HTTP+SSE transport on this address (/sse and /message) instead of stdio")
	flag.Parse()
	s := server.NewMCPServer("mcpgo-example", "1.0.0")
	s.AddTool(mcp.NewTool("wait_for_cancel",
		mcp.WithDescription("Reports progress once, then waits until the call is cancelled, and answers anyway.")),
		waitForCancel)
	s.AddTool(mcp.NewTool("slow",
		mcp.WithDescription("Reports progress at each of its steps over its seconds, then answers; when cancelled, it stops and answers anyway."),
		mcp.WithNumber("seconds", mcp.DefaultNumber(10)), mcp.WithNumber("steps", mcp.DefaultNumber(10))),
		slow)
	if *sseAddr != "" {
		if err := server.NewSSEServer(s, server.WithBaseURL("http://"+*sseAddr)).Start(*sseAddr); err != nil {
			fmt.Fprintln(os.Stderr, "mcpgoserver:", err)
			os.Exit(1)
		}
		return
	}
	if *httpAddr != "" {
		if err := server.NewStreamableHTTPServer(s, server.WithEndpointPath("/mcp")).Start(*httpAddr); err != nil {
			fmt.Fprintln(os.Stderr, "mcpgoserver:", err)
			os.Exit(1)
		}
		return
	}
	if err := server.ServeStdio(s); err != nil {
		fmt.Fprintln(os.Stderr, "mcpgoserver:", err)
		os.Exit(1)
	}
}

func slow(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	seconds, steps := req.GetFloat("seconds", 10), req.GetInt("steps", 10)
	steps = max(steps, 1)
	tick := time.NewTicker(time.Duration(seconds * float64(time.Second) / float64(steps)))
	defer tick.Stop()
	for i := range steps {
		select {
		case <-ctx.Done():
			return mcp.NewToolResultError("stopped: " + ctx.Err().Error()), nil
		case <-tick.C:
		}
		if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
			server.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/progress", map[string]any{
				"progressToken": req.Params.Meta.ProgressToken, "progress": i + 1, "total": steps})
		}
	}
	return mcp.NewToolResultText(fmt.Sprintf("slow done after %gs", seconds)), nil
}

func waitForCancel(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
		srv := server.ServerFromContext(ctx)
		srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
			"progressToken": req.Params.Meta.ProgressToken, "progress": 1, "total": 2})
	}
	<-ctx.Done()
	return mcp.NewToolResultError("stopped: " + ctx.Err().Error()), nil
}
