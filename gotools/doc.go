// Package gotools pins the Go tools the build uses (staticcheck, nfpm) in a
// module of their own, so they never leak into the product's dependencies.
// Run them with: go tool -modfile=gotools/go.mod <name>.
package gotools
