/*
Copyright 2026 The csi-lib fork authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package csilibdebug reads CSILIBDEBUG, the environment variable with which an operator turns
// off, without rebuilding the driver, a behaviour this library has by default and upstream
// csi-lib v0.12.0 has not. It follows Go's GODEBUG: one variable of comma-separated name=value
// settings, each named after the behaviour it switches and documented with the release that
// introduced that behaviour (docs/upgrading.md). A setting's value is 1 (the library's default)
// or 0 (upstream's behaviour); what a driver sets in code through the setting's Go option wins
// over it. Anything else in the variable (an unknown name, another value, a setting given twice)
// is an error, which the constructor that reads it returns: a typo never passes unnoticed.
//
// The manager reads the variable once, in NewManager; storage's Filesystem reads it in its
// constructor, for the start-up sweep that runs there, before the manager exists.
package csilibdebug

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// EnvironmentVariable is the variable's name.
const EnvironmentVariable = "CSILIBDEBUG"

// The settings' names.
const (
	IssuanceLimit      = "issuancelimit"
	OriginAnnotations  = "originannotations"
	AccessCheck        = "accesscheck"
	StartupSweep       = "startupsweep"
	OutageProbe        = "outageprobe"
	WatchFallbackReads = "watchfallbackreads"
)

// A Setting is one switch of the variable.
type Setting struct {
	// Name is the setting's name in the variable.
	Name string
	// Option is the Go option with which a driver sets the same in code (and which then wins).
	Option string
	// Introduced is the release that introduced the behaviour the setting switches.
	Introduced string
}

// Settings are every setting, in the order of docs/upgrading.md's table.
var Settings = []Setting{
	{IssuanceLimit, "manager.Options.MaxConcurrentIssuances", "v0.12.0-fork.1"},
	{OriginAnnotations, "manager.Options.DisableOriginAnnotations", "v0.12.0-fork.1"},
	{AccessCheck, "manager.Options.DisableAccessCheck", "v0.12.0-fork.1"},
	{StartupSweep, "storage.FilesystemOptions.SkipSweep", "v0.12.0-fork.1"},
	{OutageProbe, "manager.Options.DisableOutageProbe", "v0.12.0-fork.1"},
	{WatchFallbackReads, "manager.Options.DisableWatchFallbackReads", "v0.12.0-fork.1"},
}

// Values are the settings an operator gave, by name: true for 1, false for 0. A setting that is
// not in the map was not given.
type Values map[string]bool

// Parse parses a value of the variable: settings name=value separated by commas, spaces around
// each allowed; an empty value gives none.
func Parse(s string) (Values, error) {
	v := Values{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, value, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%s: %s is not name=value", EnvironmentVariable, quoted(item))
		}
		if lookup(name) == nil {
			return nil, fmt.Errorf("%s: unknown setting %s; the settings are %s", EnvironmentVariable, quoted(name), names())
		}
		if _, twice := v[name]; twice {
			return nil, fmt.Errorf("%s: setting %q is given twice", EnvironmentVariable, name)
		}
		switch value {
		case "1":
			v[name] = true
		case "0":
			v[name] = false
		default:
			return nil, fmt.Errorf("%s: setting %q has the value %s: want 0 (upstream's behaviour) or 1 (the default)", EnvironmentVariable, name, quoted(value))
		}
	}
	return v, nil
}

// FromEnvironment reads and parses the variable; raw is its value as set.
func FromEnvironment() (raw string, v Values, err error) {
	raw = os.Getenv(EnvironmentVariable)
	v, err = Parse(raw)
	return raw, v, err
}

// Off reports whether the setting is off and how to log the value it takes, given whether the
// driver turned it off in code: the driver's code wins, then the variable, then the default (on).
func (v Values) Off(name string, offInCode bool) (off bool, logged string) {
	on, given := v[name]
	switch {
	case offInCode:
		return true, v.SetInCode(name, "0")
	case given && !on:
		return true, "0 (" + EnvironmentVariable + ")"
	case given:
		return false, "1 (" + EnvironmentVariable + ")"
	}
	return false, "1 (default)"
}

// SetInCode is how to log a setting whose option the driver set in code, to the value shown:
// the option, and the operator's value if one was given, which the driver's code overrides.
func (v Values) SetInCode(name, shown string) string {
	logged := shown + " (" + lookup(name).Option
	if on, given := v[name]; given {
		value := "0"
		if on {
			value = "1"
		}
		logged += "; " + name + "=" + value + " ignored"
	}
	return logged + ")"
}

// quoted quotes s for an error, cut to its first 32 bytes: the error is logged, and what an
// operator put in the wrong variable by mistake may be a secret.
func quoted(s string) string {
	if len(s) > 32 {
		return strconv.Quote(s[:32]) + "…"
	}
	return strconv.Quote(s)
}

func lookup(name string) *Setting {
	for i := range Settings {
		if Settings[i].Name == name {
			return &Settings[i]
		}
	}
	return nil
}

func names() string {
	var n []string
	for _, s := range Settings {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}
