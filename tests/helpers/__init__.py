"""What the tests share: peers, servers, flows and waits that more than one test file uses.

Rules: a test file imports what it shares from here, never from another test file.
"""
