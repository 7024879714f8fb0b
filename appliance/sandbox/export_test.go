package sandbox

// TestHelpers are the roles the test binary can be re-executed in, by first
// argument (see testmain_test.go, which cannot reach unexported names).
var TestHelpers = map[string]func(args []string) int{
	unixClientArg:         unixClient,
	unprivilegedHelperArg: unprivilegedHelper,
	gatewayArg:            gatewayHelper,
	iouringClientArg:      iouringClient,
	sigioArg:              sigioClient,
}
