// Command gendocs writes perch's man page and bash completion from the
// commands of a built perch binary, for the .deb (image/deb/build.sh runs
// it at build time, so both always match the binary they ship with).
//
//	go run ./image/deb/gendocs -perch bin/perch -version 0.2.0 -man perch.1 -bash perch.bash
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("gendocs", flag.ContinueOnError)
	bin := fs.String("perch", "bin/perch", "the perch `binary` whose help is read (it must run on this machine)")
	version := fs.String("version", "", "the package `version` named in the page")
	date := fs.String("date", "", "the page's `date` (YYYY-MM-DD); default: SOURCE_DATE_EPOCH, else today")
	man := fs.String("man", "", "write the man page to `file`")
	bash := fs.String("bash", "", "write the bash completion to `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" || (*man == "" && *bash == "") {
		return errors.New("gendocs: -version and at least one of -man, -bash are required")
	}
	if *date == "" {
		*date = pageDate(os.Getenv("SOURCE_DATE_EPOCH"), time.Now())
	}
	cli, err := commandsFromHelp(*bin)
	if err != nil {
		return err
	}
	if *man != "" {
		var b bytes.Buffer
		if err := ManPage(&b, cli, *version, *date); err != nil {
			return err
		}
		if err := os.WriteFile(*man, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("gendocs: %w", err)
		}
	}
	if *bash != "" {
		var b bytes.Buffer
		if err := BashCompletion(&b, cli, *version); err != nil {
			return err
		}
		if err := os.WriteFile(*bash, b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("gendocs: %w", err)
		}
	}
	return nil
}

// pageDate is the page's date: SOURCE_DATE_EPOCH (reproducible builds)
// when set and valid, else now, in UTC.
func pageDate(epoch string, now time.Time) string {
	var sec int64
	if _, err := fmt.Sscan(epoch, &sec); err == nil && epoch != "" {
		return time.Unix(sec, 0).UTC().Format("2006-01-02")
	}
	return now.UTC().Format("2006-01-02")
}
