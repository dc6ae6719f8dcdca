"""All disk and Hugging Face cache access in PAW lives in this package."""
