// Command gencopyright writes the package's debian/copyright
// (/usr/share/doc/perch/copyright, machine-readable format 1.0) for a
// perch binary: Perch's own notice, then one paragraph per Go module linked
// into the binary and one for Go's runtime and standard library, each with
// the license found in the module's source.
//
// The binary is static, so it redistributes every module it links; their
// licenses (BSD, Expat) require their notices to travel with it. A module
// whose license it cannot recognise stops the build, naming the module: a
// new dependency's license gets read before it ships.
//
//	go run ./image/deb/gencopyright -o copyright [-goos linux -goarch arm64] ./cmd/perch
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gencopyright", flag.ContinueOnError)
	out := fs.String("o", "", "write to `file` (default: standard output)")
	goos := fs.String("goos", "linux", "target `GOOS` of the binary")
	goarch := fs.String("goarch", "", "target `GOARCH` of the binary (default: this machine's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pkgs := fs.Args()
	if len(pkgs) == 0 {
		pkgs = []string{"./cmd/perch"}
	}
	mods, goroot, err := linkedModules(*goos, *goarch, pkgs)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := write(&b, mods, goroot); err != nil {
		return err
	}
	if *out == "" {
		_, err := stdout.Write(b.Bytes())
		return err
	}
	return os.WriteFile(*out, b.Bytes(), 0o644)
}

// Module is one Go module linked into the binary.
type Module struct {
	Path    string
	Version string
	Dir     string
}

// linkedModules lists the modules whose packages pkgs link for goos/goarch,
// without the main module, and GOROOT.
func linkedModules(goos, goarch string, pkgs []string) ([]Module, string, error) {
	args := append([]string{"list", "-deps", "-json=Module,Standard"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
	if goarch != "" {
		cmd.Env = append(cmd.Env, "GOARCH="+goarch)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, "", fmt.Errorf("gencopyright: go list: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	type mod struct {
		Path, Version, Dir string
		Main               bool
		Replace            *mod
	}
	seen := map[string]Module{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			Standard bool
			Module   *mod
		}
		if err := dec.Decode(&p); err != nil {
			return nil, "", fmt.Errorf("gencopyright: go list output: %w", err)
		}
		if p.Standard || p.Module == nil || p.Module.Main {
			continue
		}
		m := Module{Path: p.Module.Path, Version: p.Module.Version, Dir: p.Module.Dir}
		if r := p.Module.Replace; r != nil {
			m.Dir = r.Dir
			if r.Version != "" {
				m.Version = r.Version
			}
		}
		seen[m.Path] = m
	}
	var mods []Module
	for _, m := range seen {
		mods = append(mods, m)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })

	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return nil, "", fmt.Errorf("gencopyright: go env GOROOT: %w", err)
	}
	return mods, strings.TrimSpace(string(goroot)), nil
}

// License is a recognised license: its DEP-5 short name, and the text of
// its standalone paragraph (or a pointer to /usr/share/common-licenses).
type License struct {
	Name   string
	Common string // file under /usr/share/common-licenses, when Debian ships the text
}

// classify recognises a license text. The checks look for the sentences
// that define each license, not its title, which projects often omit.
func classify(text string) (License, bool) {
	t := strings.Join(strings.Fields(text), " ")
	switch {
	case strings.Contains(t, "Apache License") && strings.Contains(t, "Version 2.0"):
		return License{Name: "Apache-2.0", Common: "Apache-2.0"}, true
	case strings.Contains(t, "Eclipse Public License") && strings.Contains(t, "v 2.0") && strings.Contains(t, "Eclipse Distribution License"):
		// Eclipse Paho: either license, at the user's choice; the EDL is the
		// BSD-3-Clause text.
		return License{Name: "EPL-2.0 or EDL-1.0"}, true
	case strings.Contains(t, "Mozilla Public License") && strings.Contains(t, "2.0"):
		return License{Name: "MPL-2.0", Common: "MPL-2.0"}, true
	case strings.Contains(t, "Permission is hereby granted, free of charge, to any person obtaining a copy"):
		return License{Name: "Expat"}, true
	case strings.Contains(t, "Redistribution and use in source and binary forms") && strings.Contains(t, "Neither the name"):
		return License{Name: "BSD-3-Clause"}, true
	case strings.Contains(t, "Redistribution and use in source and binary forms"):
		return License{Name: "BSD-2-Clause"}, true
	case strings.Contains(t, "Permission to use, copy, modify, and/or distribute this software for any purpose"):
		return License{Name: "ISC"}, true
	}
	return License{}, false
}

var (
	licenseFileRE = regexp.MustCompile(`(?i)^(licen[cs]e|copying)(\.(md|txt))?$`)
	copyrightRE   = regexp.MustCompile(`(?i)^\s*(copyright\s*(\(c\)|©)?\s*\d{4}.*)$`)
)

// moduleLicense reads the license file at the top of dir.
func moduleLicense(dir string) (text string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if !e.IsDir() && licenseFileRE.MatchString(e.Name()) {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			return string(b), err
		}
	}
	return "", errors.New("no LICENSE or COPYING file")
}

// holders returns the copyright lines of a license text, or a fallback
// naming the project's authors when it has none (Apache texts usually).
func holders(text, fallback string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if m := copyrightRE.FindStringSubmatch(l); m != nil {
			c := strings.TrimSpace(m[1])
			c = regexp.MustCompile(`(?i)^copyright\s*(\(c\)|©)?\s*`).ReplaceAllString(c, "")
			if c != "" && !contains(out, c) {
				out = append(out, c)
			}
		}
	}
	if len(out) == 0 {
		out = []string{fallback}
	}
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// body strips a license text of its copyright lines and title: what stays
// is the license proper, the same for every project under it.
func body(text string) string {
	var lines []string
	for _, l := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		if copyrightRE.MatchString(l) {
			continue
		}
		lines = append(lines, strings.TrimRight(l, " \t"))
	}
	s := strings.Trim(strings.Join(lines, "\n"), "\n")
	if first, rest, ok := strings.Cut(s, "\n"); ok && len(strings.Fields(first)) <= 4 && strings.Contains(strings.ToLower(first), "license") {
		s = strings.Trim(rest, "\n")
	}
	return s
}

// Perch's own notice. No license has been published for Perch yet; the
// paragraph says so rather than guessing one.
const perchHeader = `Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: perch
Source: https://github.com/perchhq/perch

Files: *
Copyright: 2025-2026 The Perch authors
License: LicenseRef-Perch
`

const perchLicense = `License: LicenseRef-Perch
 The authors of Perch have not published a license for it yet. Until they
 do, all rights are reserved, except those granted by the licenses of the
 components listed above, which apply to those components.
`

// write renders the copyright file. A license Debian ships in
// /usr/share/common-licenses is named and given one standalone paragraph
// pointing there; any other license (BSD, Expat, ISC) travels with its own
// text in each module's paragraph, since those texts differ in the names
// they carry. Apache-2.0 NOTICE files, which must accompany a
// redistribution, go in the paragraph's Comment.
func write(w io.Writer, mods []Module, goroot string) error {
	var b strings.Builder
	b.WriteString(perchHeader)
	var commons []string
	add := func(files, what, copyrightFallback, text, notice string) error {
		lic, ok := classify(text)
		if !ok {
			return fmt.Errorf("gencopyright: %s: license not recognised; read it and teach classify() its name (image/deb/gencopyright)", what)
		}
		fmt.Fprintf(&b, "\nFiles: %s\nCopyright:", files)
		for i, h := range holders(text, copyrightFallback) {
			if i > 0 {
				b.WriteString("          ")
			}
			fmt.Fprintf(&b, " %s\n", h)
		}
		fmt.Fprintf(&b, "License: %s\n", lic.Name)
		if lic.Common == "" {
			b.WriteString(indent(body(text)))
		} else if !contains(commons, lic.Name) {
			commons = append(commons, lic.Name)
		}
		fmt.Fprintf(&b, "Comment: %s, linked into /usr/bin/perch.\n", what)
		if strings.TrimSpace(notice) != "" {
			b.WriteString(" .\n Its NOTICE file:\n .\n")
			b.WriteString(indent(notice))
		}
		return nil
	}

	goLicense, err := os.ReadFile(filepath.Join(goroot, "LICENSE"))
	if err != nil {
		return fmt.Errorf("gencopyright: the Go runtime's license: %w", err)
	}
	if err := add("go/*", "The Go runtime and standard library", "The Go Authors", string(goLicense), ""); err != nil {
		return err
	}
	for _, m := range mods {
		text, err := moduleLicense(m.Dir)
		if err != nil {
			return fmt.Errorf("gencopyright: module %s %s (%s): %w", m.Path, m.Version, m.Dir, err)
		}
		notice, _ := os.ReadFile(filepath.Join(m.Dir, "NOTICE"))
		if err := add("vendor/"+m.Path+"/*", "Go module "+m.Path+" "+m.Version, "The "+m.Path+" authors", text, string(notice)); err != nil {
			return err
		}
	}

	b.WriteString("\n")
	b.WriteString(perchLicense)
	for _, name := range commons {
		lic, _ := classify(map[string]string{"Apache-2.0": "Apache License Version 2.0", "MPL-2.0": "Mozilla Public License 2.0"}[name])
		fmt.Fprintf(&b, "\nLicense: %s\n On Debian systems, the complete text of this license is in\n /usr/share/common-licenses/%s.\n", name, lic.Common)
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// indent formats text as a DEP-5 continuation: one leading space, and a
// lone "." for each empty line.
func indent(text string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.Trim(strings.ReplaceAll(text, "\r\n", "\n"), "\n"), "\n") {
		l = strings.TrimRight(strings.ReplaceAll(l, "\t", "    "), " ")
		if l == "" {
			b.WriteString(" .\n")
		} else {
			b.WriteString(" " + l + "\n")
		}
	}
	return b.String()
}
