// Package mqtt is the board's link to an MQTT broker: Home Assistant
// discovery of its sensors and state, and the agent over MQTT.
//
// # Concepts
//
// A Link is one MQTT 5 client (Eclipse Paho's autopaho) that keeps its
// connection up for the life of the gateway: it reconnects with jittered
// exponential backoff after any drop, then resubscribes and publishes its
// availability, discovery and state again. It never stops the gateway: a
// broker that is away or refuses the login is reported by Check (for
// /ready) and Status (for /admin/status), naming the key to fix. A broker
// that keeps closing the connection soon after each login is most often
// another board with the same client id (two boards both called
// raspberrypi): the reconnections back off, and Check says so.
//
// Topics, under topic_prefix (default perch/<hostname>):
//
//	status                        "online"/"offline", retained; the broker's last will says offline
//	sensor/<sensor>/<quantity>    a reading, e.g. perch/kitchen/sensor/kitchen/temperature 21.4
//	sensor/<sensor>/availability  "online"/"offline", retained: whether the last read worked
//	diagnostics                   {"uptime", "memory_mb", "ready", "not_ready", "sessions"}
//	usb/event                     {"event_type": "connected"|"disconnected", "device", "id", …}
//	usb/connected, usb/disconnected  the same payload, for Home Assistant device triggers
//	agent/request      (in)       {"message", "session_key"?, "id"?}, or plain text
//	agent/response                {"id", "response"} (plus "error" when the turn failed)
//	messages                      {"chat_id", "text"}: cron deliveries and the message tool
//
// Discovery configs go under discovery_prefix (default homeassistant) as
// <discovery_prefix>/<component>/<node>/<object>/config, retained: one
// device per board (model, Perch version, a link to its web page), a
// sensor entity per quantity of each configured sensor (device class and
// unit: temperature °C, humidity %, pressure hPa, illuminance lx), the
// diagnostics, and the USB event entity and device triggers. Sensor states
// and diagnostics go out every publish interval; sensors are also read a
// few times per interval, and a value that moves by more than its step
// (0.2 °C, 1 %, 0.5 hPa, 5 % of the light) or a sensor that stops or
// starts answering is published at once.
// When Home Assistant announces itself ("online" on
// <discovery_prefix>/status) everything is published again.
//
// The link remembers which discovery topics it published (Memory, kept in
// the store's meta bucket): a sensor removed from the config, or a changed
// client_id or discovery_prefix, gets an empty retained config on the next
// connection, which is how Home Assistant removes an entity. Reading the
// retained configs back from the broker instead would depend on the
// broker's ACL letting the board read the discovery prefix, and on a guess
// of when the retained messages have all arrived.
//
// # Requests
//
// A request on agent/request runs as a turn of its session_key (default
// mqtt:default) on the channel "mqtt", with the same offline commands and
// session handling as a chat. Unless mqtt.allow_all_tools is set, the turn
// asks for only the tools that cannot change the board (bus.Inbound's
// RestrictTools), as any client of the broker may publish there. The answer
// goes to the request's MQTT 5 response topic, with its correlation data,
// or else to agent/response; it echoes the request's id.
//
// QoS 1 requests are acknowledged only once answered (manual
// acknowledgement, in order as MQTT requires), in a persistent session
// (clean start off, an hour of session expiry) with a small receive
// maximum. So the broker holds back what the board has not taken yet, a
// request in flight when the link drops or the gateway stops is delivered
// again, and a busy agent makes requests wait rather than fail. A redelivery
// of a request whose turn is still running or was already answered on this
// run (same packet id and content, the duplicate flag set) is only
// acknowledged, not answered twice.
package mqtt
