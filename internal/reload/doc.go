// Package reload owns how a running process follows a configuration file:
// one Watcher (a poll every Interval, a stat first and a read and hash only
// when the file moved, SIGHUP to reload at once), the bounded read of such
// a file (ReadFile) and what a poll compares without reading (Stat). The hub
// controller follows its profile with it and the spoke's authn webhook its
// configuration, both counted in crucible_config_reloads_total{component}.
package reload
