"""The built-in chat and status page: static files (index.html, app.js, style.css, favicon.svg)
shipped as package data, and page.py, which serves them at / and /webui/*."""
