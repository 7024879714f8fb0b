//go:build !linux

package appliance

import "errors"

func mapPageByPage(start, end uintptr) error { return errors.ErrUnsupported }

func pageByPage() bool { return false }
