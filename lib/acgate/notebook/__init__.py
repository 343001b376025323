"""Running the notebooks: a notebook's parameters (``resolve``), headless execution with Papermill
(``execution``), the HTML view of executed notebooks (``html_view``), and the command line
(``python -m acgate.notebook run|html``)."""
