"""Browser test helpers shared across test folders: viewports and the CSP watch."""

from __future__ import annotations

LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def csp_watch(context, violations: list[str]) -> None:
    """Record every Content-Security-Policy violation in the context's pages: the
    `securitypolicyviolation` event, and Chromium's console message for a refused load."""
    context.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => console.error("
        "'CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI))"
    )

    def on_console(message) -> None:
        text = message.text
        if text.startswith("CSP violation") or "Content Security Policy" in text:
            violations.append(text)

    context.on("console", on_console)
