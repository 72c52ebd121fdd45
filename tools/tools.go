//go:build tools

// Package tools pins the build and check tools of the release and of
// scripts/test in a module of their own, so that none of their
// dependencies changes the versions the proxy itself is built with:
// nfpm (the Linux packages, scripts/release), Helm v4 and kubeconform (the
// Helm chart, scripts/check-chart), the MCP registry's module (its
// server.json schemas) and a JSON schema validator (scripts/check-recipes).
// The scripts build them from here: cd tools && go build PACKAGE.
// actionlint has a module of its own, tools/actionlint.
package tools

import (
	_ "github.com/goreleaser/nfpm/v2/cmd/nfpm"
	_ "github.com/modelcontextprotocol/registry/pkg/model"
	_ "github.com/santhosh-tekuri/jsonschema/v6"
	_ "github.com/yannh/kubeconform/cmd/kubeconform"
	_ "helm.sh/helm/v4/cmd/helm"
)
