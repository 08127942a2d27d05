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

package manager

// testHooks are the one way this package's tests reach into the manager: points that no
// public behaviour marks, where a test must hold an attempt or learn of something that did not
// happen. Options.testHooks is unexported, so a driver's manager has none, and every hook is
// optional.
type testHooks struct {
	// requestsRead runs in each attempt just after it has read its volume's requests from the
	// informer's cache, to let the cache catch up exactly there.
	requestsRead func(volumeID string)
	// loopStarted runs when a volume's renewal loop starts: a test that a loop did not start
	// cannot wait for a turn that never comes.
	loopStarted func(volumeID string)
	// accessCheckStarted runs in NewManager with a channel closed once the start-up access check
	// has ended (closed already when the check is off): a test that the check sent nothing
	// cannot wait for reviews that never come.
	accessCheckStarted func(ended <-chan struct{})
}
