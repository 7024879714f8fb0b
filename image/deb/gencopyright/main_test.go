package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	cases := map[string]string{
		"Apache License\n Version 2.0, January 2004":                                                                          "Apache-2.0",
		"Mozilla Public License Version 2.0":                                                                                  "MPL-2.0",
		"Permission is hereby granted, free of charge, to any person obtaining a copy\nof this":                               "Expat",
		"Redistribution and use in source and binary forms ... Neither the name of X nor":                                     "BSD-3-Clause",
		"Redistribution and use in source\n   and binary forms, with or without modification":                                 "BSD-2-Clause",
		"Permission to use, copy, modify, and/or distribute this software for any purpose with":                               "ISC",
		"Eclipse Public License - v 2.0 (EPL-2.0) ... the Eclipse Public License v2.0\nand Eclipse Distribution License v1.0": "EPL-2.0 or EDL-1.0",
	}
	for text, want := range cases {
		got, ok := classify(text)
		if !ok || got.Name != want {
			t.Errorf("classify(%q) = %v %v, want %s", text, got, ok, want)
		}
	}
	if got, ok := classify("Do what you like, but send me a postcard."); ok {
		t.Errorf("an unknown license was classified as %s", got.Name)
	}
}

func TestHolders(t *testing.T) {
	text := "MIT License\n\nCopyright (c) 2023 lmittmann\nCopyright 2024 Someone Else\n\nPermission is hereby granted"
	got := holders(text, "fallback")
	if len(got) != 2 || got[0] != "2023 lmittmann" || got[1] != "2024 Someone Else" {
		t.Errorf("holders = %q", got)
	}
	if got := holders("Apache License", "The x authors"); len(got) != 1 || got[0] != "The x authors" {
		t.Errorf("fallback = %q", got)
	}
}

// paragraphs splits a DEP-5 file into field maps (continuation lines
// appended to the field's value).
func paragraphs(t *testing.T, text string) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, block := range strings.Split(strings.TrimSpace(text), "\n\n") {
		p := map[string]string{}
		last := ""
		for _, l := range strings.Split(block, "\n") {
			if strings.HasPrefix(l, " ") {
				if last == "" {
					t.Fatalf("continuation line without a field: %q", l)
				}
				p[last] += "\n" + l
				continue
			}
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				t.Fatalf("not a field line: %q", l)
			}
			p[k] = strings.TrimSpace(v)
			last = k
		}
		out = append(out, p)
	}
	return out
}

// TestPerchBinary: every module the real binary links has a recognised
// license, and the file is well-formed: each Files paragraph has a
// Copyright and a License, and each license without its text inline has a
// standalone paragraph.
func TestPerchBinary(t *testing.T) {
	for _, goarch := range []string{"amd64", "arm64", "arm"} {
		mods, goroot, err := linkedModules("linux", goarch, []string{"github.com/perchhq/perch/cmd/perch"})
		if err != nil {
			t.Fatal(err)
		}
		if len(mods) < 5 {
			t.Fatalf("%s: only %d modules: %+v", goarch, len(mods), mods)
		}
		var b bytes.Buffer
		if err := write(&b, mods, goroot); err != nil {
			t.Fatalf("%s: %v", goarch, err)
		}
		ps := paragraphs(t, b.String())
		if !strings.HasPrefix(ps[0]["Format"], "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0") {
			t.Fatalf("header: %v", ps[0])
		}
		standalone := map[string]bool{}
		for _, p := range ps[1:] {
			if _, ok := p["Files"]; !ok {
				name, _, _ := strings.Cut(p["License"], "\n")
				standalone[name] = true
			}
		}
		files := 0
		for _, p := range ps[1:] {
			f, ok := p["Files"]
			if !ok {
				continue
			}
			files++
			if p["Copyright"] == "" {
				t.Errorf("%s: %s has no Copyright", goarch, f)
			}
			name, text, _ := strings.Cut(p["License"], "\n")
			if name == "" {
				t.Errorf("%s: %s has no License", goarch, f)
			}
			if text == "" && !standalone[name] {
				t.Errorf("%s: %s: license %s has neither text nor a standalone paragraph", goarch, f, name)
			}
		}
		if files != len(mods)+2 {
			t.Errorf("%s: %d Files paragraphs for %d modules (+ perch + go)", goarch, files, len(mods))
		}
		for _, m := range mods {
			if !strings.Contains(b.String(), "Files: vendor/"+m.Path+"/*") {
				t.Errorf("%s: no paragraph for %s", goarch, m.Path)
			}
		}
	}
}

// TestUnknownLicenseStops: a module with a license nobody has read stops
// the build and names the module.
func TestUnknownLicenseStops(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "LICENSE"), []byte("Do what you like, but send me a postcard.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	goroot := t.TempDir()
	if err := os.WriteFile(filepath.Join(goroot, "LICENSE"), []byte("Redistribution and use in source and binary forms. Neither the name"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := write(&bytes.Buffer{}, []Module{{Path: "example.org/postcard", Version: "v1.0.0", Dir: dir}}, goroot)
	if err == nil || !strings.Contains(err.Error(), "example.org/postcard") || !strings.Contains(err.Error(), "not recognised") {
		t.Fatalf("err = %v", err)
	}
	err = write(&bytes.Buffer{}, []Module{{Path: "example.org/none", Version: "v1.0.0", Dir: t.TempDir()}}, goroot)
	if err == nil || !strings.Contains(err.Error(), "example.org/none") || !strings.Contains(err.Error(), "no LICENSE") {
		t.Fatalf("err = %v", err)
	}
}
