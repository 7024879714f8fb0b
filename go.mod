module github.com/perchhq/perch

go 1.26.0

require (
	github.com/chromedp/cdproto v0.159.0
	github.com/chromedp/chromedp v0.23.0
	github.com/coreos/go-systemd/v22 v22.7.0
	github.com/eclipse/paho.golang v0.23.0
	github.com/godbus/dbus/v5 v5.2.4
	github.com/gorilla/websocket v1.5.3
	github.com/jochenvg/go-udev v0.0.0-20240801134859-b65ed646224b
	github.com/julienschmidt/httprouter v1.3.0
	github.com/lmittmann/tint v1.2.1
	github.com/robfig/cron/v3 v3.0.1
	github.com/sashabaranov/go-openai v1.43.0
	go.etcd.io/bbolt v1.5.0
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
	periph.io/x/conn/v3 v3.7.2
	periph.io/x/devices/v3 v3.7.4
	periph.io/x/host/v3 v3.8.5
)

require (
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/jkeiser/iter v0.0.0-20200628201005-c8aa0ae784d1 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
)
