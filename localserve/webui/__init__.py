"""The built-in chat and status page: static files (index.html, style.css, favicon.svg and the
JavaScript modules, app.js first) shipped as package data, and page.py, which serves them at /
and /webui/*."""
