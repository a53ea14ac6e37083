"""The Textual frontend: the app (`app`), its main screen (`screens/main.py`) and the other screens,
the widgets (`widgets/`), and how events become what is drawn (`fold`, `items`, `render`, `live_*`).

It may import `core` and everything below it; never `headless`. Only this layer imports Textual.
"""
