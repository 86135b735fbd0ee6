package serve

import (
	"time"

	"github.com/asrprof/asrprof/option"
)

// DefaultConfig is the daemon of a user who sets nothing but its hooks
// (Parse, Finish).
func DefaultConfig() Config {
	return Config{Addr: DefaultAddr, Dir: "runs/serve", RemoteIdle: 10 * time.Minute}
}

// Options lists `asrprof serve`'s options; they set a Config.
func Options() []option.Option {
	return []option.Option{
		{Name: "listen", Field: "Addr", Usage: "`ADDR` to listen on; an address other than loopback needs --token"},
		{Name: "token", Field: "Token", Usage: "bearer `TOKEN` that every route asks for (default $ASRPROF_TOKEN)"},
		{Name: "dir", Field: "Dir", Usage: "`DIR` the captures' bundles go to, one folder per capture id"},
		{Name: "pidfile", Field: "PIDFile", Usage: "write the daemon's pid to `FILE` once it listens (removed when it stops): kill \"$(cat FILE)\" stops it"},
		{Name: "remote-idle", Field: "RemoteIdle", Usage: "finish a remote capture whose driver has not called for this long (`DURATION`)"},
	}
}
