// Package tools pins the Go tools the build uses (staticcheck, nfpm) in a
// module of their own, so they never leak into the product's dependencies.
// Run them with: go tool -modfile=tools/go.mod <name>.
package tools
