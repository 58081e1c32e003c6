"""The one place that holds a clock and joins the store and the math."""
