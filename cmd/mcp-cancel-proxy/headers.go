package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/envexpand"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// parseHeader reads a "Name: value" header as --header gives it, the value
// expanded (envexpand: ${NAME} is the environment variable NAME).
func parseHeader(line string) (upstream.Header, error) {
	name, value, err := splitHeader(line)
	if err != nil {
		return upstream.Header{}, err
	}
	if strings.ContainsAny(value, "\r\n") {
		return upstream.Header{}, fmt.Errorf("header %s: a value has no line breaks", name)
	}
	v, err := envexpand.Expand(value)
	if err != nil {
		return upstream.Header{}, fmt.Errorf("header %s: %w", name, err)
	}
	return upstream.Header{Name: name, Value: v}, nil
}

// headersOf returns the upstream headers the configuration (and the
// flags over it) set, their values expanded; sorted by name.
func headersOf(cfg config.Config) ([]upstream.Header, error) {
	var hs []upstream.Header
	for _, name := range slices.Sorted(maps.Keys(cfg.HTTP.UpstreamHeaders)) {
		h, err := parseHeader(name + ": " + cfg.HTTP.UpstreamHeaders[name])
		if err != nil {
			return nil, fmt.Errorf("http.upstream_headers: %w", err)
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// readHeaderFile reads headers from a file, one "Name: value" a line;
// blank lines and lines starting with # are skipped.
func readHeaderFile(path string, into map[string]string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--header-file: %w", err)
	}
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := addHeaderLine(line, into); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n+1, err)
		}
	}
	return nil
}

// addHeaderLine adds a "Name: value" line to headers, the value as written
// (expanded when the proxy starts).
func addHeaderLine(line string, headers map[string]string) error {
	name, value, err := splitHeader(line)
	if err == nil {
		headers[name] = value
	}
	return err
}

// splitHeader splits a "Name: value" line, both trimmed.
func splitHeader(line string) (name, value string, err error) {
	name, value, ok := strings.Cut(line, ":")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") {
		return "", "", fmt.Errorf("header %q is not Name: value", line)
	}
	return name, value, nil
}
