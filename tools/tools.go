//go:build tools

// Package tools pins the build tools of the release (nfpm, which builds
// the Linux packages) in a module of their own, so that no packaging
// dependency changes the versions the proxy itself is built with.
// scripts/release builds them from here: cd tools && go build PACKAGE.
package tools

import _ "github.com/goreleaser/nfpm/v2/cmd/nfpm"
