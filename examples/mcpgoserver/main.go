// Command mcpgoserver is a small stdio MCP server on mark3labs/mcp-go, the
// other popular Go SDK, used by mcp-cancel-proxy's end-to-end tests: when a
// call is cancelled, mcp-go cancels the handler's context but still writes
// a response, which the proxy must keep from the client. With -http ADDR it
// serves Streamable HTTP at /mcp instead of stdio; with -sse ADDR, the
// 2024-11-05 HTTP+SSE transport (GET /sse, POST /message).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

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

func waitForCancel(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
		srv := server.ServerFromContext(ctx)
		srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
			"progressToken": req.Params.Meta.ProgressToken, "progress": 1, "total": 2})
	}
	<-ctx.Done()
	return mcp.NewToolResultError("stopped: " + ctx.Err().Error()), nil
}
