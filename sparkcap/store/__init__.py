"""The warehouse and its feeders: the only writers of raw.*."""
